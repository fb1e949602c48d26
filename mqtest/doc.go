// Package mqtest tests handlers without a broker and without real time.
//
// New runs a handler through exactly the middleware chain Broker.Consume
// builds from the same consumer options (middleware.Standard included),
// against an in-memory recorder of the library's hops and a fake clock: an
// in-process retry wait advances the clock instead of sleeping, a hop to a
// retry rung, .dlq or .parked is recorded with its headers instead of
// published, and Run follows a message through its rungs to wherever it
// ends, so every path of the retry ladder is asserted in microseconds.
//
//	c := mqtest.New(t, "shipping.orders", ship, middleware.Standard(policy))
//	r := c.Deliver(mq.Message{Body: []byte(`{"id":"o-1"}`)})
//	// r.Outcome, r.Attempts, r.Waits, r.Hops[0].Queue, r.Hops[0].Reason()
//
// Publisher is a fake mq.Sender as strict as the broker, for code handed a
// publisher (fxmodule.AsPublisher, typed.Publish): it runs the runtime's
// own validator (mq.ErrInvalid for what Publish refuses) and, given the
// topology, routes every publish as RabbitMQ would (mq.ErrUnroutable where
// no binding matches a mandatory publish), recording what it took and the
// queues it reached.
// NewDelivery and Attempts build single deliveries and the attempt counter
// for testing a middleware of one's own.
//
// What it owns: the fakes only; every decision is the real middleware's.
// What it does not do: it runs no Subscribe or Stop hooks (nothing is
// declared; a policy the retry ladder would refuse fails New), opens no
// connection and settles nothing on a channel: Result.Outcome is what the
// consumer runtime would do with the chain's result.
//
// What it must not touch: it imports mq (through internal/seam for the
// delivery's test seams and the publish validator, which mq does not
// export) and topology (the routing it reads), never middleware, otelmq or
// fxmodule, so any of their tests may use it (fxmodule's bridge to it is
// package fxmodule/fxmoduletest).
package mqtest
