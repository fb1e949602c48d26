package otelmq

import (
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/acemq/acemq-go/mq"
)

// ScopeName is the instrumentation scope of every span and instrument this
// package creates: its import path.
const ScopeName = "github.com/acemq/acemq-go/otelmq"

// Version is the instrumentation scope's version: the library's.
const Version = mq.Version

// The acemq.* attributes, for what the messaging conventions do not cover.
const (
	// AttemptKey is the attempt number (1 for the first delivery): on a
	// process span the attempt the delivery started at (on every one, 1
	// included, so traces can be searched by it), on its
	// acemq.attempt events each attempt, on a hop span the attempt the next
	// delivery will be.
	AttemptKey = attribute.Key("acemq.attempt")
	// OutcomeKey is what became of a delivery: ack, retry, dead-letter,
	// park, requeue or reject ([mq.Outcome]).
	OutcomeKey = attribute.Key("acemq.outcome")
	// HopKey is why the library republished a message itself: retry,
	// dead-letter, park or replay ([mq.Outcome]). Absent on the
	// application's own publishes.
	HopKey = attribute.Key("acemq.hop")
	// ReasonKey is why a message was set aside (x-acemq-reason): exhausted,
	// rejected, parked or rung-missing.
	ReasonKey = attribute.Key("acemq.reason")
	// RetryKindKey is where a retry waits: in-process or broker, or
	// carried for an in-process wait cut short at stop, whose next
	// attempt goes back through the message's own queue.
	RetryKindKey = attribute.Key("acemq.retry.kind")
	// RequeueReasonKey is why the library returned a delivery to its queue
	// (acemq.message.requeues): "cut short", "panic" or "requeued".
	RequeueReasonKey = attribute.Key("acemq.requeue.reason")
	// RetryWaitKey is a retry's wait, in milliseconds.
	RetryWaitKey = attribute.Key("acemq.retry.wait_ms")
	// TargetKey, on the events of a process span, is the queue a hop was
	// for.
	TargetKey = attribute.Key("acemq.target")
	// LinkKey, on a process span's links, says what the link points at:
	// "creation" (the application's publish of the message) or "hop" (the
	// library's republish that caused this delivery).
	LinkKey = attribute.Key("acemq.link")
)

// The span names' operations and the values of messaging.operation.name.
const (
	opPublish = "publish"
	opProcess = "process"
)

// eventAttempt is the process span's event for each call of the handler.
const eventAttempt = "acemq.attempt"

// Option configures an [Instrumentation]. Options are values of an interface
// with an unexported method, so only this package defines them.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	tp        trace.TracerProvider
	mp        metric.MeterProvider
	prop      propagation.TextMapPropagator
	linksOnly bool
}

// WithTracerProvider sets the TracerProvider spans are created with.
// Default: the global one (otel.GetTracerProvider), read when [New] runs. A
// nil provider keeps the default.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return optionFunc(func(c *config) {
		if tp != nil {
			c.tp = tp
		}
	})
}

// WithMeterProvider sets the MeterProvider instruments are created with.
// Default: the global one (otel.GetMeterProvider), read when [New] runs. A
// nil provider keeps the default.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return optionFunc(func(c *config) {
		if mp != nil {
			c.mp = mp
		}
	})
}

// WithPropagators sets the propagator that writes and reads a message's
// creation context (traceparent and tracestate with the W3C propagator).
// Default: the global one (otel.GetTextMapPropagator) when one has been set
// by the time [New] runs, else W3C trace context — every AceMQ library with
// tracing installed writes traceparent and tracestate on every publish
// (docs/contract.md, "Decisions"), so an app that never configured
// propagation still gets one trace per message.
// A nil propagator keeps the default.
//
// The hop header (x-acemq-hop-traceparent) is always written and read in
// the W3C traceparent format, whatever the propagator, so any AceMQ library
// that knows this optional extension can read it (docs/contract.md, "Go's
// extension headers").
func WithPropagators(p propagation.TextMapPropagator) Option {
	return optionFunc(func(c *config) {
		if p != nil {
			c.prop = p
		}
	})
}

// WithLinksOnly starts a new trace for every delivery, linked to the
// message's creation context and to the hop that caused it, instead of
// making the delivery a child of the creation context. For messages whose
// retries wait hours: a trace that stays open that long defeats a backend
// that samples whole traces at their tail. Default: off, so a message's
// whole life is one trace.
func WithLinksOnly() Option {
	return optionFunc(func(c *config) { c.linksOnly = true })
}

// Instrumentation is AceMQ's OpenTelemetry instrumentation. It implements
// [mq.PublishHook], [mq.DeliveryHook], [mq.AttemptHook] and [mq.EventHook]; install
// it in [mq.Config].Hooks. It is safe for concurrent use and holds no state
// between calls: whatever a publish or a delivery needs is carried in the
// context the hooks hand on.
type Instrumentation struct {
	tracer    trace.Tracer
	prop      propagation.TextMapPropagator
	linksOnly bool
	m         instruments
	publishes cache[publishKey, publishStatic]
	queues    cache[queueKey, queueStatic]
	lastQueue atomic.Pointer[queueStatic] // the queue looked up last
}

var (
	_ mq.PublishHook  = (*Instrumentation)(nil)
	_ mq.DeliveryHook = (*Instrumentation)(nil)
	_ mq.AttemptHook  = (*Instrumentation)(nil)
	_ mq.EventHook    = (*Instrumentation)(nil)
)

// New returns the instrumentation, its tracer, meter and instruments
// created once, here. Instruments the MeterProvider refuses are replaced
// by no-ops (and the refusal reported to otel.Handle): instrumentation
// never stops a service.
func New(opts ...Option) *Instrumentation {
	c := config{}
	for _, o := range opts {
		if o != nil {
			o.apply(&c)
		}
	}
	if c.tp == nil {
		c.tp = otel.GetTracerProvider()
	}
	if c.mp == nil {
		c.mp = otel.GetMeterProvider()
	}
	if c.prop == nil {
		c.prop = otel.GetTextMapPropagator()
		if len(c.prop.Fields()) == 0 { // nothing set: the global propagates nothing
			c.prop = propagation.TraceContext{}
		}
	}
	ins := &Instrumentation{
		tracer: c.tp.Tracer(ScopeName,
			trace.WithInstrumentationVersion(Version),
			trace.WithSchemaURL(semconv.SchemaURL)),
		prop:      c.prop,
		linksOnly: c.linksOnly,
	}
	ins.m = newInstruments(c.mp.Meter(ScopeName,
		metric.WithInstrumentationVersion(Version),
		metric.WithSchemaURL(semconv.SchemaURL)))
	return ins
}
