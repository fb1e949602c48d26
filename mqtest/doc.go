// Package mqtest tests handlers without a broker and without real time.
//
//	c := mqtest.New(t, "shipping.orders", ship, middleware.Standard(policy))
//	r := c.Deliver(mq.Message{Body: []byte(`{"id":"o-1"}`)})
//	// r.Outcome, r.Attempts, r.Waits, r.Hops[0].Queue, r.Hops[0].Reason()
//
// # A consumer without a broker
//
// [New] runs a handler through exactly the middleware chain
// [mq.Broker.Consume] builds from the same consumer options
// (middleware.Standard included), against an in-memory recorder of the
// library's hops and a fake clock: an in-process retry wait advances the
// clock instead of sleeping, a hop to a retry rung, .dlq or .parked is
// recorded with its headers instead of published ([Hop]), and
// [Consumer.Run] follows a message through its rungs to wherever it ends, so
// every path of the retry ladder is asserted in microseconds. [Result] is
// what became of one delivery.
//
// # Other fakes
//
// [Publisher] is a fake [mq.Sender] as strict as the broker, for code
// handed a publisher (fxmodule.AsPublisher, typed.Publish): it runs the
// runtime's own validator ([mq.ErrInvalid] for what Publish refuses) and,
// given the topology, routes every publish as RabbitMQ would
// ([mq.ErrUnroutable] where no binding matches a mandatory publish),
// recording what it took and the queues it reached. [NewDelivery] and
// [Chain] build single deliveries and the consumer's chain (attempts
// counted, decisions carried out) for testing a middleware of one's own.
//
// # Limits
//
// It owns the fakes only; every decision is the real middleware's. It runs
// no Subscribe or Stop hooks (nothing is declared; a policy the retry
// ladder would refuse fails New), opens no connection and settles nothing
// on a channel: Result.Outcome is what the consumer runtime would do with
// the chain's result.
//
// It imports mq, and only what mq exports to every user (mq.Runner,
// mq.Runtime, mq.NewDelivery, mq.CheckPublish, mq.IsMandatory: a fake of
// your own can be built the same way), and topology (the routing it
// reads), never middleware, otelmq or fxmodule, so any of their
// tests may use it (fxmodule's bridge to it is package
// fxmodule/fxmoduletest).
package mqtest
