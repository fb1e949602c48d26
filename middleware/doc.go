// Package middleware holds AceMQ's built-in consumer middleware: the retry
// ladder ([RetryLadder]), parking and dead-lettering ([Parking], [Park],
// [Reject]), declare-on-start ([DeclareOnStart]), panic recovery
// ([Recover]), per-attempt timeouts ([Timeout]) and logging ([Logging]),
// and [Standard], which puts them in the order that works.
//
//	c, err := b.Consume(ctx, "orders.new", handler, middleware.Standard(policy))
//
// # What it owns
//
// The failure handling of docs/contract.md ("Retry policy", "Who declares
// what", "Hops", "Headers"): what happens after a handler's error, which
// queue a message is republished to, the x-acemq-* headers written on the
// way. The middleware here decides (an [mq.Decision]: which queue, which
// reason); the consumer carries it out (default exchange, mandatory,
// confirmed before the original is acknowledged, the contract's events when
// a hop cannot be made). Every queue name comes from package topology,
// derived from the policy the ladder runs.
//
// # What it must not touch
//
// Connections, channels, waits, hops and settlement: package mq owns them.
// A middleware returns nil, an error, [mq.Requeue] or an [mq.Decision], and
// the runtime acts.
// Instrumentation: package otelmq observes through mq's hooks.
//
// # Writing one
//
// Every middleware here has one shape, an [mq.Middleware]: a
// func([mq.Handler]) [mq.Handler] whose Handler may also implement
// [mq.Subscriber] (work on every (re)subscribe) and have a Stop(ctx) error
// method (work when the consumer stops). A plain func of your own composes
// with them the same way; [Stack] is Standard's list for [mq.Chain].
package middleware
