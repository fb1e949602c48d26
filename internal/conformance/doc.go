// Package conformance runs the language-neutral vectors in the
// repository's conformance/ directory against the Go library. It is the Go
// runner that the README in that directory describes for every AceMQ
// library.
//
// What it owns: reading the vector files, turning their typed AMQP values
// ({"longstr": "x"}, {"long": 40000}, …) into the Go values amqp091-go sends
// and receives, building Go topologies and policies from the neutral calls,
// and one Check function per vector file. Each Check returns the
// differences it found as plain sentences (nil when Go agrees with every
// vector), so a test can run it on the vectors as written and on altered
// copies, and see it fail when the expected data describes a broken library.
//
// What it must not touch: the network. Vectors that need a broker (stored
// queue arguments, hop and replay headers) are driven by the integration
// tests: they decode the expected values here (Decode, Canon) and hand the
// headers they captured to CheckHeaders. Package middleware's tests also
// run hops.json without a broker, handing CheckHeaders the copy a hop
// would publish.
//
// It is internal: only this module's tests use it.
package conformance
