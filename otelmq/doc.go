// Package otelmq is AceMQ's OpenTelemetry instrumentation: traces, metrics
// and log correlation for everything a broker publishes and consumes.
//
//	ins := otelmq.New() // the global TracerProvider, MeterProvider and propagator
//	cfg.Hooks = append(cfg.Hooks, ins)
//	b := mq.New(cfg)
//
// # What it owns
//
//   - [Instrumentation], one value implementing all four of mq's hook
//     interfaces ([mq.PublishHook], [mq.DeliveryHook], [mq.AttemptHook],
//     [mq.EventHook]). Installed in [mq.Config].Hooks, it sees every publish (the
//     library's own hops included), every delivery, every call of the
//     application's handler and the library's events.
//   - The trace of a message's whole life, in one trace: a PRODUCER span
//     "publish <destination>" per publish, a CONSUMER span "process <queue>"
//     per delivery with an event "acemq.attempt" per call of the handler
//     (in-process retries included; events, not spans, because they were
//     measured cheaper) and "acemq.retry" per retry, and a PRODUCER span per
//     hop (retry, dead letter, park, replay), a child of the process span
//     that made it. The application's publish writes the message's
//     creation context (traceparent/tracestate, through the propagator); a
//     hop never overwrites it, and writes its own span context to
//     x-acemq-hop-traceparent ([mq.HeaderHopTraceparent]) instead.
//     Each process span is a child of the creation context and links to
//     the hop that caused the delivery (a link to the creation context
//     would only repeat the parent). [WithLinksOnly] starts a new trace per
//     delivery, linked to both, for retries that wait hours.
//   - Metrics: the messaging conventions' messaging.client.sent.messages,
//     messaging.client.consumed.messages, messaging.client.operation.duration
//     and messaging.process.duration, and AceMQ's acemq.retries,
//     acemq.message.outcomes, acemq.retry.rung.missing,
//     acemq.messages.set.aside.failed and acemq.message.requeues.
//   - [HeaderCarrier], a propagation.TextMapCarrier over AMQP headers, and
//     [LogHandler], a slog.Handler wrapper that adds trace_id and span_id.
//   - [ErrorType], the stable error.type names it reports (see there).
//
// # Attributes
//
// Attributes follow the messaging semantic conventions
// (go.opentelemetry.io/otel/semconv/v1.43.0), with messaging.system
// "rabbitmq"; what the conventions do not cover is under acemq.*
// (acemq.attempt, acemq.outcome, acemq.hop, acemq.reason, acemq.retry.kind,
// acemq.retry.wait_ms, acemq.requeue.reason, acemq.target, acemq.link: see
// the *Key constants).
// error.type takes the names ErrorType documents. No attribute, event or
// log field carries a message body or a credential: server.address is the
// host the connection went to, never its URL.
//
// # Cost
//
// Measured (BenchmarkAttempts here, with two bare-SDK floors beside
// it; the tracing group of `make bench`): with the SDK and every trace
// sampled, 14 allocations per delivery, all but one of them the SDK's own
// work on the span (the span, its attributes, its snapshot, the
// contexts); the library's one is the context the hooks hand on, 80
// bytes. "sdk-required" — a bare SDK span given the same attributes the
// same way — costs as many instructions as "tracing": what a delivery
// costs is what the SDK charges for a span with the attributes the
// messaging conventions require, about twice a span with none
// ("sdk-floor"), most of it the garbage collector's work on the
// attribute slices while the span waits in the batch processor. A span
// that is not sampled costs 8 allocations, with no link, no hop header
// parsed and no attribute set at its end; metrics alone 5.
//
// Every process span carries messaging.message.id and acemq.attempt (1
// included, and in the trace of the message's publish too): operators
// search traces by both, and a publish span may live in another service's
// backend. That makes the common span ten attributes, past the eight the
// SDK de-duplicates on the stack when a span ends, so it builds a map:
// measured with BenchmarkAttempts/tracing/attempts=1 before and after (issue
// 24; 2 CPUs shared with other work, load 8–16), 15 → 18 allocations and
// 2770 → 3354 bytes per delivery with the harness (the SDK alone with the
// required attributes, sdk-required, unchanged at 12 and 2625), and CPU per
// delivery from a median of 6.7 µs to one of 8.2 µs over nine runs of each,
// the two builds alternating (single rounds +0.3 to +2.1 µs; sdk-required
// 5.0–6.7 µs throughout): about 1.5 µs more per sampled delivery. An
// unsampled span sets no attribute and costs what it did. The earlier tracing time target (2.5 µs a delivery) is retired: it
// sat below the SDK's own cost for a span with the required attributes.
// The conversation id is left to the publish span when the process span
// is its child, and server.port is on publish spans and in the metrics
// only.
//
// # What it must not touch
//
// Connections, channels, settlement and the
// failure handling (packages mq and middleware). It observes through the
// hooks only, and the only thing it writes is trace context into the
// headers of a message about to be published. mq does not import it.
package otelmq
