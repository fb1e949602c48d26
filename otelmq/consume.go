package otelmq

import (
	"context"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/acemq/acemq-go/mq"
)

var (
	linkCreation = []attribute.KeyValue{LinkKey.String("creation")}
	linkHop      = []attribute.KeyValue{LinkKey.String("hop")}
)

// consumerKind is built once: an option is an interface value, and
// building it per delivery allocates.
var (
	consumerKind = trace.WithSpanKind(trace.SpanKindConsumer)
	producerKind = trace.WithSpanKind(trace.SpanKindProducer)
)

// queueStatic is what every delivery from one queue, on one server,
// shares.
type queueStatic struct {
	key      queueKey
	name     string                  // the span name
	start    []trace.SpanStartOption // kind, constant attributes (and new root): built once
	consumed *measure                // the consumer metrics' attributes
	failed   measuresBy              // … with error.type
	outcomes measuresBy              // system, destination and acemq.outcome
	acked    *measure                // outcomes for "ack", the common case, without a lookup
}

type queueKey struct{ queue, server string }

// newQueueStatic builds a queue's constants; linksOnly makes every span a
// new root.
func newQueueStatic(k queueKey, linksOnly bool) *queueStatic {
	attrs := make([]attribute.KeyValue, 0, 6)
	attrs = append(attrs,
		semconv.MessagingSystemRabbitMQ,
		semconv.MessagingOperationName(opProcess),
		semconv.MessagingOperationTypeProcess,
		semconv.MessagingDestinationName(k.queue),
	)
	if host := serverHost(k.server); host != "" {
		// server.port is on the publish spans and the metrics: a process
		// span kept under nine attributes keeps the map the SDK
		// de-duplicates them with, when it ends, on the stack.
		attrs = append(attrs, semconv.ServerAddress(host))
	}
	start := []trace.SpanStartOption{consumerKind, trace.WithAttributes(attrs...)}
	if linksOnly {
		start = append(start, trace.WithNewRoot())
	}
	m := make([]attribute.KeyValue, 0, 5)
	m = append(m, semconv.MessagingSystemRabbitMQ, semconv.MessagingOperationName(opProcess))
	m = appendDestination(m, k.queue)
	m = appendServer(m, k.server)
	o := appendDestination([]attribute.KeyValue{semconv.MessagingSystemRabbitMQ}, k.queue)
	qs := &queueStatic{
		key:      k,
		name:     opProcess + " " + k.queue,
		start:    start,
		consumed: newMeasure(slices.Clone(m)...),
		failed:   measuresBy{base: m, key: semconv.ErrorTypeKey},
		outcomes: measuresBy{base: o, key: OutcomeKey},
	}
	qs.acked = qs.outcomes.get(string(mq.OutcomeAck))
	return qs
}

func (ins *Instrumentation) newQueueStatic(k queueKey) *queueStatic {
	return newQueueStatic(k, ins.linksOnly)
}

func (ins *Instrumentation) queueStatic(k queueKey) *queueStatic {
	if qs := ins.lastQueue.Load(); qs != nil && qs.key == k {
		return qs // most services consume from one queue at a time
	}
	if anonymous(k.queue) {
		return newQueueStatic(k, ins.linksOnly)
	}
	qs := ins.queues.get(k, ins.newQueueStatic)
	ins.lastQueue.Store(qs)
	return qs
}

// deliveryCtx is the context OnDelivery hands the chain: the consumer's,
// with the process span, and the delivery's state.
//
// It is the one allocation of ours per delivery, so it holds no more than
// the hooks need: the attributes OnDeliveryDone sets are built in a pooled
// buffer instead (endAttrPool).
type deliveryCtx struct {
	context.Context
	span      trace.Span
	start     time.Time // zero when messaging.process.duration is not recorded
	qs        *queueStatic
	attempt   int  // the attempt the delivery started at
	parented  bool // the span's parent is the message's creation context
	recording bool // span.IsRecording() at start, asked once: it takes the span's lock
}

// endAttrs is how many attributes OnDeliveryDone sets at most: routing
// key, delivery tag, message and conversation id, attempt, outcome,
// error.type. The common delivery (acknowledged, with a message id, in the
// trace of its publish) sets five: with the five it starts with, a span of
// ten. Operators search traces by message id and attempt, so both are on
// every process span even though the SDK, past eight attributes, allocates
// its de-duplication map when the span ends (BenchmarkAttempts measures
// it; the otelmq package documentation has the numbers).
const endAttrs = 7

// endAttrPool holds the buffers OnDeliveryDone builds its attributes in.
// Span.SetAttributes copies what it is given (the SDK appends each value
// to the span's own slice), so a buffer goes back to the pool as soon as
// the call returns; a buffer in the deliveryCtx would add 448 bytes of
// pointers to every delivery's allocation, which the garbage collector
// pays for again while the span waits in the batch processor.
var endAttrPool = sync.Pool{New: func() any { return new([endAttrs]attribute.KeyValue) }}

type deliveryCtxKey struct{}

func (c *deliveryCtx) Value(key any) any {
	if key == (deliveryCtxKey{}) {
		return c
	}
	return c.Context.Value(key)
}

func deliveryOf(ctx context.Context) *deliveryCtx {
	st, _ := ctx.Value(deliveryCtxKey{}).(*deliveryCtx)
	return st
}

// OnDelivery starts the CONSUMER span "process <queue>". Its parent is the
// message's creation context (read with the propagator from the headers),
// or in links-only mode none: a new trace, linked to the creation context.
// When the delivery was caused by a hop, the span also links to the hop
// span (x-acemq-hop-traceparent). It counts
// messaging.client.consumed.messages.
//
// The span starts with the attributes a sampler may decide on (system,
// operation, destination, server.address), as options built once per
// queue; the message's own are set with the outcome when it ends, in one
// go: the routing key and delivery tag, messaging.message.id and
// acemq.attempt on every delivery (1 included, and when the span is a child
// of the message's publish span: operators search process spans by both,
// and the publish span may live in another service's backend), and
// messaging.message.conversation_id only when the span is not a child of
// the publish span, which carries it (links-only mode, or a message
// published without trace context). Links are
// added once the span is known to record, so a span that is not sampled
// costs no link and no hop header parse; a sampler does not see them.
func (ins *Instrumentation) OnDelivery(ctx context.Context, d *mq.Delivery) context.Context {
	qs := ins.queueStatic(queueKey{queue: d.Queue(), server: d.Server()})
	ctx = ins.prop.Extract(ctx, HeaderCarrier(d.Headers))
	var created trace.SpanContext
	parented := false
	if ins.linksOnly {
		// In the default mode the creation context is the parent: a link
		// to it would only repeat it.
		created = trace.SpanContextFromContext(ctx)
	} else {
		parented = trace.SpanContextFromContext(ctx).IsValid()
	}
	ctx, span := ins.tracer.Start(ctx, qs.name, qs.start...)
	recording := span.IsRecording()
	if recording {
		if created.IsValid() {
			span.AddLink(trace.Link{SpanContext: created, Attributes: linkCreation})
		}
		if hop := readHop(d.Headers); hop.IsValid() {
			span.AddLink(trace.Link{SpanContext: hop, Attributes: linkHop})
		}
	}
	ins.m.consumed.Add(ctx, 1, qs.consumed.add...)
	var start time.Time
	if ins.m.processing.Enabled(ctx) {
		start = time.Now()
	}
	return &deliveryCtx{Context: ctx, span: span, start: start, qs: qs, attempt: d.Attempt(), parented: parented, recording: recording}
}

// OnDeliveryDone ends the process span with the message's attributes and
// acemq.outcome. The delivery failed — status Error and error.type — when
// the chain returned an error (the message was rejected or requeued) or
// when its outcome is a retry, a dead letter or a park (d.Cause() is the
// handler's error then). It records messaging.process.duration (from
// delivery to settlement, so in-process retry waits and a requeue pause
// are included) and acemq.message.outcomes.
func (ins *Instrumentation) OnDeliveryDone(ctx context.Context, d *mq.Delivery, err error) {
	st := deliveryOf(ctx)
	if st == nil {
		return
	}
	outcome := d.Outcome()
	if err == nil && outcome != mq.OutcomeAck {
		err = d.Cause()
	}
	m := st.qs.consumed
	if st.recording {
		buf := endAttrPool.Get().(*[endAttrs]attribute.KeyValue)
		attrs := buf[:0]
		if d.RoutingKey != "" {
			attrs = append(attrs, semconv.MessagingRabbitMQDestinationRoutingKey(d.RoutingKey))
		}
		attrs = append(attrs, semconv.MessagingRabbitMQMessageDeliveryTag(int(d.DeliveryTag)))
		if d.MessageId != "" {
			attrs = append(attrs, semconv.MessagingMessageID(d.MessageId))
		}
		if !st.parented && d.CorrelationId != "" {
			attrs = append(attrs, semconv.MessagingMessageConversationID(d.CorrelationId))
		}
		attrs = append(attrs, AttemptKey.Int(st.attempt))
		attrs = append(attrs, OutcomeKey.String(string(outcome)))
		if err != nil {
			et := ErrorType(err)
			st.span.SetStatus(codes.Error, mq.ErrorText(err))
			attrs = append(attrs, semconv.ErrorTypeKey.String(et))
			m = st.qs.failed.get(et)
		}
		st.span.SetAttributes(attrs...)
		clear(attrs) // hold no message's strings while pooled
		endAttrPool.Put(buf)
	} else if err != nil {
		m = st.qs.failed.get(ErrorType(err))
	}
	st.span.End()
	if !st.start.IsZero() {
		ins.m.processing.Record(ctx, time.Since(st.start).Seconds(), m.rec...)
	}
	om := st.qs.acked
	if outcome != mq.OutcomeAck {
		om = st.qs.outcomes.get(string(outcome))
	}
	ins.m.outcomes.Add(ctx, 1, om.add...)
}

// OnAttempt does nothing: the handler runs in the process span's context,
// so its own spans and log records belong to the delivery.
func (ins *Instrumentation) OnAttempt(ctx context.Context, _ *mq.Delivery) context.Context {
	return ctx
}

// OnAttemptDone adds the event "acemq.attempt" to the process span for a
// failed attempt, with acemq.attempt, error.type and exception.message
// (the error's text, capped), and for a successful one that followed
// failed ones in the same delivery, with acemq.attempt. A delivery whose
// first attempt succeeds gets no event: its span says it all.
//
// Attempts are events rather than child spans because that was measured
// cheaper (BenchmarkAttempts): with the SDK, attempt spans cost 8 to 11
// allocations (1.3 to 1.9 KB) and 1 to 3 µs more per attempt, and add a
// span to export — a hand-off to the batch processor — to every delivery,
// where the events cost nothing on the common path.
func (ins *Instrumentation) OnAttemptDone(ctx context.Context, d *mq.Delivery, err error) {
	st := deliveryOf(ctx)
	if st == nil || !st.recording || (err == nil && d.Attempt() == st.attempt) {
		return
	}
	if err == nil {
		st.span.AddEvent(eventAttempt, attemptOK(d.Attempt())...)
		return
	}
	st.span.AddEvent(eventAttempt, trace.WithAttributes(
		AttemptKey.Int(d.Attempt()),
		semconv.ErrorTypeKey.String(ErrorType(err)),
		semconv.ExceptionMessage(mq.ErrorText(err)),
	))
}

// attemptOKs are the options of a successful attempt's event, built once
// for the attempt numbers most deliveries have.
var attemptOKs = func() [][]trace.EventOption {
	a := make([][]trace.EventOption, 16)
	for i := range a {
		a[i] = []trace.EventOption{trace.WithAttributes(AttemptKey.Int(i))}
	}
	return a
}()

func attemptOK(n int) []trace.EventOption {
	if n >= 0 && n < len(attemptOKs) {
		return attemptOKs[n]
	}
	return []trace.EventOption{trace.WithAttributes(AttemptKey.Int(n))}
}

// OnEvent reports the library's events. A retry counts in acemq.retries
// (by acemq.retry.kind) and becomes an event "acemq.retry" on the process
// span, which also takes acemq.retry.kind and acemq.retry.wait_ms of the
// latest retry. A missing rung and a failed set-aside count in
// acemq.retry.rung.missing and acemq.messages.set.aside.failed and become
// events of those names on the process span. A delivery the library
// returned to its queue itself counts in acemq.message.requeues (by
// acemq.requeue.reason). The events carry acemq.attempt, acemq.target (the
// queue of the hop) and error.type where they apply. Other events (the
// connection's) are left to the logs.
func (ins *Instrumentation) OnEvent(ctx context.Context, e mq.Event) {
	var c metric.Int64Counter
	switch e.Name {
	case mq.EventRetry:
		c = ins.m.retries
	case mq.EventRungMissing:
		c = ins.m.rungMissing
	case mq.EventSetAsideFailed:
		c = ins.m.setAsideFailed
	case mq.EventRequeued:
		c = ins.m.requeues
	default:
		return
	}
	attrs := make([]attribute.KeyValue, 0, 6)
	attrs = append(attrs, semconv.MessagingSystemRabbitMQ)
	attrs = appendDestination(attrs, e.Queue)
	switch e.Name {
	case mq.EventRetry:
		attrs = append(attrs, RetryKindKey.String(string(e.Kind)))
	case mq.EventRequeued:
		attrs = append(attrs, RequeueReasonKey.String(string(e.Kind)))
	}
	c.Add(ctx, 1, metric.WithAttributes(attrs...))

	span := trace.SpanFromContext(ctx)
	if st := deliveryOf(ctx); st != nil {
		span = st.span
	}
	if !span.IsRecording() {
		return
	}
	ev := []attribute.KeyValue{AttemptKey.Int(e.Attempt)}
	if e.Name == mq.EventRetry {
		kw := []attribute.KeyValue{RetryKindKey.String(string(e.Kind)), RetryWaitKey.Int64(e.Wait.Milliseconds())}
		span.SetAttributes(kw...)
		ev = append(ev, kw...)
	}
	if e.Target != "" {
		ev = append(ev, TargetKey.String(e.Target))
	}
	if e.Err != nil {
		ev = append(ev, semconv.ErrorTypeKey.String(ErrorType(e.Err)))
	}
	span.AddEvent(e.Name, trace.WithAttributes(ev...))
}

// appendDestination adds messaging.destination.name for a metric, unless
// the destination is a server-named queue, whose names are too many.
func appendDestination(attrs []attribute.KeyValue, dest string) []attribute.KeyValue {
	if dest == "" || anonymous(dest) {
		return attrs
	}
	return append(attrs, semconv.MessagingDestinationName(dest))
}
