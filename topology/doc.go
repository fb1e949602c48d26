// Package topology describes what a service needs a RabbitMQ broker to have —
// exchanges, queues, bindings — as a value that can be built, printed,
// validated and merged before anything is sent to a broker.
//
// What this package owns: every name of the AceMQ contract
// (docs/contract.md, "Names": the .dlq and .parked suffixes, retry rungs,
// acemq.dlx and acemq.retry), the queue argument rules ("Queue arguments":
// quorum by default, classic by leaving x-queue-type off, the one function
// that builds a retry rung's argument table), the exact printout and plan
// ("Topology and printout"), validation ("Validation") and the failure half
// a consumer declares for itself ("Who declares what": ForConsumer). Each
// contract constant is written here once and read everywhere else.
//
// What it must not touch: the network. Declaring a Topology is the mq
// package's job (mq.Broker.Declare); this package only says what to declare.
// A plan is a statement of intent, never a difference against a live broker.
//
// A Builder collects mistakes instead of panicking or returning errors from
// each call (a Go builder has nowhere else to put them): Validate, Plan and
// mq.Broker.Declare return them all at once, each naming the call that was
// wrong.
package topology
