// Package middleware holds AceMQ's built-in consumer middleware: the retry
// ladder, parking and dead-lettering, declare-on-start, panic recovery,
// per-attempt timeouts and logging, and Standard, which puts them in the
// right order.
//
// What it owns: the failure handling of docs/contract.md ("Retry policy",
// "Who declares what", "Hops", "Headers") — what happens after a handler's
// error, which queue a message is republished to, the x-acemq-* headers
// written on the way, and the contract's events when a hop cannot be made.
// Every hop goes through mq.Delivery.Forward (default exchange, mandatory,
// confirmed before the original is acknowledged), and every queue name comes
// from package topology, derived from the policy the ladder runs.
//
// What it must not touch: connections, channels and settlement (package mq
// owns them: a middleware returns nil, an error, or mq.Requeue, and the
// runtime settles), and instrumentation (package otelmq observes through
// mq's hooks).
//
// Every middleware here has one shape: a func(mq.Handler) mq.Handler whose
// Handler may also implement mq.Subscriber (work on every (re)subscribe)
// and mq.Stopper. A plain func(mq.Handler) mq.Handler of your own composes
// with them the same way.
package middleware
