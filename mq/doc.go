// Package mq is the broker core of AceMQ for Go: the connection to RabbitMQ
// and everything that goes through it. Middleware (package middleware),
// OpenTelemetry (package otelmq) and fx (package fxmodule) sit above it and
// plug in through [Middleware] and the hook interfaces; mq imports none of
// them, so the core is usable on its own.
//
//	b := mq.New(mq.Config{URLs: []string{"amqp://guest:guest@127.0.0.1:5672/"}})
//	err := b.Start(ctx) // connects; supervised until Close
//	...
//	err = b.Publisher("").Publish(ctx, "orders.new", mq.Message{Body: body})
//	c, err := b.Consume(ctx, "orders.new", handler, middleware.Standard(policy))
//
// How it works inside, file by file, is in DESIGN.md at the module's root.
//
// # Connection
//
// A [Broker] owns one supervised connection. [Broker.Start] dials
// (honouring its context) through every URL of its [Config]; once started, a
// supervisor redials a lost connection with capped, jittered backoff until
// [Broker.Close], with fresh connection and channel objects each time
// (amqp091-go's experimental Config.Recovery is never used: it reuses
// channel objects, so an old delivery tag could be acked on the new
// channel). A connection that keeps dying soon after it came up backs off
// as a failed attempt (one that lived less than 5 s). Channels are handed out, never
// shared: each publisher and consumer has its own, and every declaration or
// inspection ([Broker.Declare], [Broker.QueueExists], [Broker.DeleteQueue];
// package ops counts and peeks) runs on a throwaway channel, so a refusal kills only
// that. [Broker.Channel] hands one to code of your own.
//
// What the broker forgets, the Broker declares again: it remembers what
// went through [Broker.Declare], and on every new connection, before any
// consumer resubscribes, declares again the exclusive, auto-delete and
// transient queues and exchanges among it, with their bindings (an
// exclusive or auto-delete queue only while a consumer still needs it:
// one whose consumers all stopped stays deleted); a queue
// it declared that a subscribe finds missing (deleted under its consumer)
// is declared again with its bindings and failure half
// ([EventTopologyRedeclared]). [Config].NoRedeclare turns this off.
//
// The library owns the socket under each connection: a write that moves no
// byte for two heartbeat intervals ends the connection, so no call waits on
// a dead socket, and every call takes a context and returns by its end. A
// connection that did not end cleanly (the broker's close-ok read, every
// byte acknowledged) is reset, not closed, so nothing written to it
// reaches the broker later, behind what was sent since: neither what the
// kernel holds nor what a TCP proxy or load balancer that passes resets on
// holds (it acknowledged the bytes, and would deliver them after a FIN). TLS
// for amqps:// is done by this package ([Config].TLS or the URL's
// parameters), not by amqp091-go. [Broker.Check] says whether the service is
// ready, and names a memory or disk alarm that blocks publishing.
//
// # Publishing
//
// A [Publisher] publishes to one exchange, confirmed, pipelined and
// mandatory: [Publisher.Publish] returns nil once the broker confirmed the
// message and routed it to a queue, [ErrUnroutable] when no queue took it
// (see [AllowUnroutable]), [ErrNacked] when the broker refused it. A publish
// in flight when the connection dies is sent again on the next one
// (at-least-once). [Publisher.PublishBatch] sends many and waits for all.
// Code that publishes depends on [Sender], which mqtest fakes.
//
// Every name, property and table the library sends is checked at the call
// against what the wire and amqp091-go's reader accept (short strings of at
// most 255 bytes; headers and arguments nested at most 32 deep, at most 8192
// entries a table, of types AMQP carries; [CheckPublish] runs the same checks
// on a publish): a bad value fails its own call with [ErrInvalid], naming the
// field and the limit, and never the frame, the channel or the connection.
//
// # Consuming
//
// [Broker.Consume] runs a [Handler] wrapped in [Middleware] on a queue:
// the [Consumer] subscribes, settles each [Delivery] on the channel it came
// on, survives reconnects (running its middleware's [Subscriber] hooks
// again) and drains on [Consumer.Stop]. The handler's error decides the
// outcome: nil acknowledges, [Requeue] returns the message to its queue
// after a pause, any other error that reaches the runtime rejects it without
// requeue. Options: [WithPrefetch], [WithConcurrency], [WithMiddleware],
// [WithMaxWaiting], [InOrder], [WithRequeuePause], [WithGiveUpAfter].
// Acknowledgements are coalesced: one basic.ack with multiple=true covers
// the settled prefix of a channel's deliveries, sent within a few
// milliseconds, and never covers a delivery still being handled, waiting
// or returned.
//
// Middleware decides; the consumer acts. A middleware's answer for a
// delivery is a [Decision] (an [Outcome]: wait in-process and call again,
// hop to a rung, to .dlq or to .parked with a [Reason], requeue, reject),
// returned as its error; the consumer's [Runner] alone carries it out, at
// once, just outside that middleware: it waits (freeing the worker for the
// rest of the queue) and calls the middleware again, hops (keeping the
// message's origin and dropping what would make the copy vanish, multiply
// or be refused), confirms, reports the events and settles, so the
// middleware outside sees what became of the delivery, not the decision
// (a reject, made by the consumer, passes up as it is). A fake runs
// the same Runner with a [Runtime] of its own ([NewDelivery], package
// mqtest). [Delivery.Attempt] numbers the attempts across in-process
// waits, broker rungs and restarts ([AttemptOf] reads the header).
//
// # Hooks and events
//
// [Config].Hooks installs instrumentation: values implementing [PublishHook]
// (each publish, as a [PublishInfo]), [DeliveryHook], [AttemptHook] and
// [EventHook] (the contract's events, [Event]). Each event is also the
// message of the log record that reports it, so it is greppable and the
// same in every AceMQ library.
//
// # Errors
//
// Errors match sentinels with errors.Is ([ErrClosed], [ErrUnroutable],
// [ErrNacked], [ErrInvalid], [ErrNotFound], …); a refusal by the broker is
// a [*BrokerError] with its reply code ([BrokerError.Code]). Credentials never
// appear in what this package logs or returns ([Redact]).
package mq
