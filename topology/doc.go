// Package topology describes what a service needs a RabbitMQ broker to have —
// exchanges, queues, bindings — as a value that can be built, printed,
// validated and merged before anything is sent to a broker.
//
//	t := topology.New().
//		Exchange("orders-events", topology.Topic).
//		Queue("shipping.orders", topology.DeadLetter(), topology.Retry(policy)).
//		Binding("shipping.orders", "orders-events", "order.placed")
//	fmt.Print(t) // the plan, byte for byte the same in every AceMQ library
//
// # What it owns
//
// Every name of the AceMQ contract (docs/contract.md, "Names": the .dlq and
// .parked suffixes ([DeadLetterQueue], [ParkedQueue]), retry rungs,
// acemq.dlx and acemq.retry), the queue argument rules ("Queue arguments":
// quorum by default, classic by leaving x-queue-type off, the one function
// that builds a retry rung's argument table), the exact printout and plan
// ("Topology and printout": [Topology.Plan]), validation ("Validation":
// [Topology.Validate]) and the failure half a consumer declares for itself
// ("Who declares what": [ForConsumer]). Each contract constant is written
// here once and read everywhere else. A queue another owner declares (an
// operator's .dlq with a length limit) is marked [Existing]: checked, not
// declared (a project extension, docs/contract.md).
//
// # Mistakes
//
// A [Topology] under construction collects mistakes instead of panicking or
// returning errors from each call (a Go builder has nowhere else to put
// them): Validate, Plan and mq.Broker.Declare return them all at once, each
// an [*Error] naming the call that was wrong.
//
// # What it must not touch
//
// The network. Declaring a Topology is package mq's job (mq.Broker.Declare);
// this package only says what to declare. A plan is a statement of intent,
// never a difference against a live broker.
package topology
