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
//     It owns the socket under each connection (socket.go): a write that
//     moves no byte for two heartbeat intervals ends the connection, a
//     publisher's run of writes goes out in one system call, and frames
//     after the handshake wait until the connection's listeners are in
//     place (so TLS is done by this package, above that socket, not by
//     amqp091-go). A connection that keeps dying soon after it came up
//     backs off as a failed attempt (flap.go), and Check says whether the
//     service is ready (health.go).
//   - Declare and inspection (QueueExists, MessageCount, DeleteQueue).
//   - The validator (validate.go): every name, property and table the
//     library sends is checked at the call against what the wire and
//     amqp091-go's reader accept, so a bad value fails its own call with
//     ErrInvalid and never the frame, the channel or the connection.
//   - Publisher: confirmed, pipelined publishing with mandatory returns
//     correlated to the publish that caused them, republished after a
//     connection loss until its context ends (at-least-once). Each of its
//     channels has a writer and a waker goroutine, which end with the
//     channel; a publish refused beside others is sent again alone.
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
//     vanish, multiply or be refused). Each consumer has one goroutine,
//     which serves one subscription after another until Stop (or
//     Broker.Close) or it gives up; a subscription's workers (the
//     concurrency, plus one in place of each delivery waiting in-process)
//     and its mover have returned before the next one starts, the watcher
//     of each of its channels ends with that channel, and an acker's flush
//     timer is stopped when its channel is given up.
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
