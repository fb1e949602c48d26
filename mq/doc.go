// Package mq is the broker core of AceMQ for Go: the connection to RabbitMQ
// and everything that goes through it.
//
// What it owns:
//
//   - Broker: one supervised connection. Start dials (honouring its
//     context); a supervisor redials with capped, jittered backoff through
//     every configured URL until Close, with fresh connection and channel
//     objects each time (amqp091-go's experimental Config.Recovery is never
//     used: it reuses channel objects, so an old delivery tag can be acked on
//     the new channel). Channels are handed out, never shared: each
//     publisher and consumer has its own, and every declaration or
//     inspection runs on a throwaway channel, so a refusal kills only that.
//   - Declare and inspection (QueueExists, MessageCount, DeleteQueue).
//   - Publisher: confirmed, pipelined publishing with mandatory returns
//     correlated to the publish that caused them, republished after a
//     connection loss until its context ends (at-least-once).
//   - Consumer: the runtime that subscribes, runs a handler wrapped in
//     middleware, settles each delivery on the channel it came on, survives
//     reconnects and drains on Stop. It owns what a delivery needs while it
//     waits in-process (Delivery.Wait frees the worker; once a few wait on
//     the channel consumed on, the subscription moves to another channel of
//     the same connection, so the waiting ones hold up no healthy ack and no
//     room in the window: lanes.go), how acknowledgements are coalesced into
//     multiple acks that never cover a delivery still in hand (AckEach
//     turns that off), the attempt a delivery is (its header, the broker's
//     delivery count past two returns, and what the consumer remembers of
//     a delivery it returned itself), and the copy a hop publishes
//     (Delivery.HopMessage: the origin kept, nothing that would make it
//     vanish, multiply or be refused).
//   - The types every other package builds on: Handler, HandlerFunc,
//     Middleware, Delivery, Message, the instrumentation hooks, the
//     contract's header names and events.
//
// What it must not touch: the built-in middleware (package middleware),
// OpenTelemetry (package otelmq) and fx (package fxmodule) all sit above it
// and plug in through Middleware and the hook interfaces. mq does not import
// them, so the core is usable on its own.
//
// Credentials never appear in what this package logs or returns: URLs are
// redacted before they are printed.
package mq
