package otelmq

import (
	"context"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/topology"
)

// defaultExchange names the default exchange when a publish has neither an
// exchange nor a routing key, as RabbitMQ itself does.
const defaultExchange = "amq.default"

// publishStatic is what every publish to one destination, on one server,
// of one kind, shares.
type publishStatic struct {
	name   string               // the span name
	attrs  []attribute.KeyValue // the span's constant attributes
	ok     *measure             // the metrics' attributes
	failed measuresBy           // … with error.type
}

type publishKey struct {
	dest, server string
	hop          mq.Outcome
}

func newPublishStatic(k publishKey) *publishStatic {
	attrs := make([]attribute.KeyValue, 0, 8)
	attrs = append(attrs,
		semconv.MessagingSystemRabbitMQ,
		semconv.MessagingOperationName(opPublish),
		semconv.MessagingOperationTypeSend,
		semconv.MessagingDestinationName(k.dest),
	)
	attrs = appendServer(attrs, k.server)
	if k.hop != "" {
		attrs = append(attrs, HopKey.String(string(k.hop)))
	}
	m := make([]attribute.KeyValue, 0, 8)
	m = append(m, semconv.MessagingSystemRabbitMQ, semconv.MessagingOperationName(opPublish), semconv.MessagingOperationTypeSend)
	m = appendDestination(m, k.dest)
	m = appendServer(m, k.server)
	if k.hop != "" {
		m = append(m, HopKey.String(string(k.hop)))
	}
	return &publishStatic{
		name:   opPublish + " " + k.dest,
		attrs:  attrs,
		ok:     newMeasure(slices.Clone(m)...),
		failed: measuresBy{base: m, key: semconv.ErrorTypeKey},
	}
}

func (ins *Instrumentation) publishStatic(k publishKey) *publishStatic {
	if anonymous(k.dest) {
		return newPublishStatic(k)
	}
	return ins.publishes.get(k, newPublishStatic)
}

// publishCtx is the context OnPublish hands OnPublishDone: the caller's,
// with the publish span, and the publish's state.
type publishCtx struct {
	context.Context
	span  trace.Span
	start time.Time
	ps    *publishStatic
}

// publishStart holds a publish span's start attributes and options while
// OnPublish starts it. The SDK copies both before Start returns, so the
// buffer goes back to publishStartPool at once: kept in the publishCtx, it
// would add some 900 bytes of pointers to every publish's allocation, for
// as long as the publish waits for its confirm (the process span's end
// attributes are pooled for the same reason, endAttrPool).
type publishStart struct {
	attrs [publishAttrs]attribute.KeyValue
	opts  [3]trace.SpanStartOption
}

var publishStartPool = sync.Pool{New: func() any { return new(publishStart) }}

// publishAttrs is how many attributes a publish span starts with at most:
// the constant ones (system, operation name and type, destination,
// server.address and server.port, acemq.hop) and the publish's own
// (routing key, message and conversation id, and for a hop attempt,
// reason, retry kind and wait).
const publishAttrs = 14

type publishCtxKey struct{}

func (c *publishCtx) Value(key any) any {
	if key == (publishCtxKey{}) {
		return c
	}
	return c.Context.Value(key)
}

// OnPublish starts the PRODUCER span "publish <destination>" (the exchange,
// or for the default exchange the routing key, which names the queue) and
// writes trace context into the message's headers:
//
//   - the application's publish (p.Hop empty) writes its span's context
//     with the propagator: the message's creation context;
//   - a hop (retry, dead letter, park, replay) never touches the creation
//     context: it writes its span's context to x-acemq-hop-traceparent, so
//     the next delivery links to it. Only a message that carries no
//     creation context at all (published without this instrumentation) gets
//     one, from its first hop, so its later deliveries still share a trace.
//
// A hop whose context has no span (a replay tool) is made a child of the
// message's creation context, or in links-only mode a new trace linked to
// it.
func (ins *Instrumentation) OnPublish(ctx context.Context, p *mq.PublishInfo) context.Context {
	dest := p.Exchange
	if dest == "" {
		dest = p.RoutingKey
	}
	if dest == "" {
		dest = defaultExchange
	}
	ps := ins.publishStatic(publishKey{dest: dest, server: p.Server, hop: p.Hop})
	var headers amqp.Table
	if p.Message != nil {
		headers = p.Message.Headers
	}
	buf := publishStartPool.Get().(*publishStart)
	attrs := append(buf.attrs[:0], ps.attrs...)
	if p.RoutingKey != "" {
		attrs = append(attrs, semconv.MessagingRabbitMQDestinationRoutingKey(p.RoutingKey))
	}
	if m := p.Message; m != nil {
		if m.MessageId != "" {
			attrs = append(attrs, semconv.MessagingMessageID(m.MessageId))
		}
		if m.CorrelationId != "" {
			attrs = append(attrs, semconv.MessagingMessageConversationID(m.CorrelationId))
		}
	}

	kind := producerKind
	var link trace.SpanStartOption
	if p.Hop != "" {
		attrs = append(attrs, AttemptKey.Int(mq.AttemptOf(headers)))
		if r := headerString(headers, mq.HeaderReason); r != "" {
			attrs = append(attrs, ReasonKey.String(r))
		}
		if p.Hop == mq.OutcomeRetry {
			attrs = append(attrs, RetryKindKey.String("broker"))
			if w, ok := rungWait(p.RoutingKey); ok {
				attrs = append(attrs, RetryWaitKey.Int64(w.Milliseconds()))
			}
		}
		if !trace.SpanContextFromContext(ctx).IsValid() {
			// No span to be a child of: join the message's own trace.
			created := ins.prop.Extract(ctx, HeaderCarrier(headers))
			if sc := trace.SpanContextFromContext(created); sc.IsValid() {
				if ins.linksOnly {
					link = trace.WithLinks(trace.Link{SpanContext: sc, Attributes: linkCreation})
				} else {
					ctx = created
				}
			}
		}
	}
	opts := append(buf.opts[:0], kind, trace.WithAttributes(attrs...))
	if link != nil {
		opts = append(opts, link)
	}
	ctx, span := ins.tracer.Start(ctx, ps.name, opts...)
	clear(attrs) // hold no message's strings while pooled
	clear(opts)
	publishStartPool.Put(buf)

	if headers != nil {
		if p.Hop == "" {
			ins.prop.Inject(ctx, HeaderCarrier(headers))
		} else {
			writeHop(ctx, headers)
			if !trace.SpanContextFromContext(ins.prop.Extract(context.Background(), HeaderCarrier(headers))).IsValid() {
				ins.prop.Inject(ctx, HeaderCarrier(headers))
			}
		}
	}
	return &publishCtx{Context: ctx, span: span, start: time.Now(), ps: ps}
}

// OnPublishDone ends the publish span (status Error and error.type when
// the publish was not confirmed) and records messaging.client.sent.messages
// and messaging.client.operation.duration.
func (ins *Instrumentation) OnPublishDone(ctx context.Context, p *mq.PublishInfo, err error) {
	st, _ := ctx.Value(publishCtxKey{}).(*publishCtx)
	if st == nil {
		return
	}
	m := st.ps.ok
	if err != nil {
		m = st.ps.failed.get(fail(st.span, err))
	}
	st.span.End()
	ins.m.sent.Add(ctx, 1, m.add...)
	ins.m.opDuration.Record(ctx, time.Since(st.start).Seconds(), m.rec...)
}

// writeHop writes the span context of ctx to the hop header in the W3C
// traceparent format, or removes a stale one when there is no valid span.
func writeHop(ctx context.Context, headers amqp.Table) {
	var c valueCarrier
	propagation.TraceContext{}.Inject(ctx, &c)
	if c.traceparent == "" {
		delete(headers, mq.HeaderHopTraceparent)
		return
	}
	headers[mq.HeaderHopTraceparent] = c.traceparent
}

// readHop reads the hop header's span context (string or bytes).
func readHop(headers amqp.Table) trace.SpanContext {
	v := headerString(headers, mq.HeaderHopTraceparent)
	if v == "" {
		return trace.SpanContext{}
	}
	return trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), &valueCarrier{traceparent: v}))
}

func headerString(h amqp.Table, key string) string {
	switch v := h[key].(type) {
	case string:
		return v
	case []byte:
		return string(v)
	}
	return ""
}

// rungWait reads a rung's wait from its name (topology.ParseRung), classic
// or durable.
func rungWait(rung string) (time.Duration, bool) {
	_, d, _, ok := topology.ParseRung(rung)
	return d, ok
}

// serverHost is the host of a host:port, or the whole when it has no port.
func serverHost(hostport string) string {
	if host, _, err := net.SplitHostPort(hostport); err == nil {
		return host
	}
	return hostport
}

// appendServer adds server.address and server.port from host:port.
func appendServer(attrs []attribute.KeyValue, hostport string) []attribute.KeyValue {
	if hostport == "" {
		return attrs
	}
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return append(attrs, semconv.ServerAddress(hostport))
	}
	attrs = append(attrs, semconv.ServerAddress(host))
	if n, err := strconv.Atoi(port); err == nil {
		attrs = append(attrs, semconv.ServerPort(n))
	}
	return attrs
}

// anonymous reports whether a destination is a server-named queue
// (amq.gen-…): one per connection, too many names for a metric attribute.
func anonymous(dest string) bool { return strings.HasPrefix(dest, "amq.gen-") }
