// Package retry is the retry policy of the AceMQ contract as pure values:
// how many deliveries a message gets, how long to wait between them, which of
// those waits the consumer waits in its own process and which ones it hands
// to the broker's delay queues ("rungs").
//
//	p := retry.Exponential(6, 10*time.Second) // waits 10s, 20s, 40s, 80s, 160s
//	step := p.After(attempt)                   // what to do after a failed attempt
//
// # What it owns
//
// The schedule arithmetic of docs/contract.md, "Retry policy" ([Policy],
// [Exponential], [Fixed], [Waits], [Policy.After], [InProcessLimit]), and the
// validation that keeps a policy expressible on the broker (broker waits are
// whole seconds: [Policy.Validate]).
//
// # What it must not touch
//
// Names, queues, headers or any I/O. Package topology turns a policy's
// broker rungs into queues; package middleware runs a policy against
// deliveries. Both read the rungs from the one Policy value, never from a
// second list.
package retry
