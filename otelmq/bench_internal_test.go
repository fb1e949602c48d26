package otelmq

import (
	"context"
	"errors"
	"flag"
	"strconv"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/attribute"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/acemq/acemq-go/internal/testenv"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/mqtest"
)

// cpuPerOp reports the process's CPU time per iteration (user and system,
// every thread: the batch processor's goroutine and the collector
// included) beside ns/op. On a shared machine a benchmark's wall time
// follows whatever else runs; its CPU time far less.
func cpuPerOp(b *testing.B, run func()) {
	b.Helper()
	c0 := testenv.CPU()
	n := 0
	for b.Loop() {
		run()
		n++
	}
	b.ReportMetric(float64((testenv.CPU()-c0).Nanoseconds())/float64(n), "cpu-ns/op")
}

// benchSyncSpans makes the benchmarks end spans with a synchronous
// processor instead of the batch processor. The batch processor's
// goroutine runs when the scheduler lets it, and drops spans when its
// queue is full, so under valgrind (one thread at a time) how much of
// its work lands in a run varies from run to run; with the simple
// processor an instruction count is the same run after run:
//
//	go test -c -o /tmp/otelmq.test ./otelmq
//	valgrind --tool=callgrind /tmp/otelmq.test -test.run '^$' \
//	    -test.bench 'BenchmarkAttempts/tracing' -test.benchtime 20000x -otelmq.sync-spans
var benchSyncSpans = flag.Bool("otelmq.sync-spans", false, "end the benchmarks' spans with a simple (synchronous) span processor, not the batch processor")

// spanProcessor is the benchmarks' span processor: a batch processor (what
// services use) with a discarding exporter, or with -otelmq.sync-spans a
// simple one.
func spanProcessor() sdktrace.TracerProviderOption {
	if *benchSyncSpans {
		return sdktrace.WithSpanProcessor(sdktrace.NewSimpleSpanProcessor(discard{}))
	}
	return sdktrace.WithBatcher(discard{})
}

type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

// attemptSpans is the alternative BenchmarkAttempts measures against the
// events OnAttemptDone adds: an INTERNAL child span "attempt <n>" of the
// process span per call of the handler, carried by the handler's context.
type attemptSpans struct {
	*Instrumentation
	tracer trace.Tracer
}

type attemptSpanCtx struct {
	context.Context
	span trace.Span
}

type attemptSpanKey struct{}

func (c *attemptSpanCtx) Value(key any) any {
	if key == (attemptSpanKey{}) {
		return c
	}
	return c.Context.Value(key)
}

func (a attemptSpans) OnAttempt(ctx context.Context, d *mq.Delivery) context.Context {
	ctx, span := a.tracer.Start(ctx, "attempt "+strconv.Itoa(d.Attempt()),
		trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(AttemptKey.Int(d.Attempt())))
	return &attemptSpanCtx{Context: ctx, span: span}
}

func (a attemptSpans) OnAttemptDone(ctx context.Context, _ *mq.Delivery, err error) {
	st, _ := ctx.Value(attemptSpanKey{}).(*attemptSpanCtx)
	if st == nil {
		return
	}
	if err != nil {
		fail(st.span, err)
	}
	st.span.End()
}

// BenchmarkAttempts measures a delivery's hooks with its attempts recorded
// as events on the process span (what OnAttemptDone does) and as child
// spans (attemptSpans), with one attempt — the common case — and three (two
// in-process retries): an SDK TracerProvider with a batch processor and a
// discarding exporter, a MeterProvider with a ManualReader. "tracing" and
// "metrics" are the events variant with only one of the two providers;
// "unsampled" is "tracing" with a sampler that records nothing.
func BenchmarkAttempts(b *testing.B) {
	for _, mode := range []string{"events", "spans", "tracing", "metrics", "unsampled"} {
		for _, calls := range []int{1, 3} {
			b.Run(mode+"/attempts="+strconv.Itoa(calls), func(b *testing.B) {
				sampler := sdktrace.AlwaysSample()
				if mode == "unsampled" {
					sampler = sdktrace.NeverSample()
				}
				tp := sdktrace.NewTracerProvider(spanProcessor(), sdktrace.WithSampler(sampler))
				mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
				defer tp.Shutdown(context.Background())
				defer mp.Shutdown(context.Background())
				opts := []Option{WithTracerProvider(tp), WithMeterProvider(mp), WithPropagators(propagation.TraceContext{})}
				switch mode {
				case "tracing", "unsampled":
					opts = append(opts, WithMeterProvider(metricnoop.NewMeterProvider()))
				case "metrics":
					opts = append(opts, WithTracerProvider(tracenoop.NewTracerProvider()))
				}
				ins := New(opts...)
				var hook mq.AttemptHook = ins
				if mode == "spans" {
					hook = attemptSpans{ins, tp.Tracer(ScopeName)}
				}
				headers := amqp.Table{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
				fail := errors.New("boom")
				b.ReportAllocs()
				cpuPerOp(b, func() {
					d := mqtest.NewDelivery("orders", amqp.Delivery{Headers: headers, MessageId: "m", DeliveryTag: 1, Body: []byte("x"), RoutingKey: "orders"})
					ctx := ins.OnDelivery(context.Background(), d)
					h := mqtest.Chain(mq.HandlerFunc(func(context.Context, *mq.Delivery) error {
						if d.Attempt() < calls {
							return fail
						}
						return nil
					}), []mq.AttemptHook{hook})
					for h.Handle(ctx, d) != nil {
					}
					ins.OnDeliveryDone(ctx, d, nil)
				})
			})
		}
	}
	b.Run("none", func(b *testing.B) {
		// The harness alone: a delivery and its attempt wrapper.
		b.ReportAllocs()
		cpuPerOp(b, func() {
			d := mqtest.NewDelivery("orders", amqp.Delivery{MessageId: "m", DeliveryTag: 1, Body: []byte("x"), RoutingKey: "orders"})
			_ = mqtest.Chain(mq.HandlerFunc(func(context.Context, *mq.Delivery) error { return nil }), nil).Handle(context.Background(), d)
		})
	})
	b.Run("sdk-floor", func(b *testing.B) {
		// What any instrumentation pays the SDK at the least: a span with
		// a parent from a traceparent header and no attribute, started and
		// ended with the batch processor. "tracing" less this is ours.
		tp := sdktrace.NewTracerProvider(spanProcessor())
		defer tp.Shutdown(context.Background())
		tr := tp.Tracer(ScopeName)
		prop := propagation.TraceContext{}
		headers := amqp.Table{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
		b.ReportAllocs()
		cpuPerOp(b, func() {
			d := mqtest.NewDelivery("orders", amqp.Delivery{Headers: headers, MessageId: "m", DeliveryTag: 1, Body: []byte("x"), RoutingKey: "orders"})
			ctx := prop.Extract(context.Background(), HeaderCarrier(d.Headers))
			ctx, span := tr.Start(ctx, "process orders")
			_ = mqtest.Chain(mq.HandlerFunc(func(context.Context, *mq.Delivery) error { return nil }), nil).Handle(ctx, d)
			span.End()
		})
	})
	b.Run("sdk-required", func(b *testing.B) {
		// sdk-floor with the attributes "tracing" ends its span with —
		// the messaging conventions' required ones and acemq.outcome —
		// handed to the SDK the way the library hands them (the
		// constant ones as the queue's start options, the delivery's own
		// at the end in one call, from a buffer that costs nothing here),
		// and nothing else of the library's: no context of its own, no
		// metric, no hook. "tracing" less this is what the library adds;
		// this less sdk-floor is what the attributes cost in the SDK.
		tp := sdktrace.NewTracerProvider(spanProcessor())
		defer tp.Shutdown(context.Background())
		tr := tp.Tracer(ScopeName)
		prop := propagation.TraceContext{}
		qs := newQueueStatic(queueKey{queue: "orders"}, false)
		headers := amqp.Table{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
		end := make([]attribute.KeyValue, 0, 3)
		b.ReportAllocs()
		cpuPerOp(b, func() {
			d := mqtest.NewDelivery("orders", amqp.Delivery{Headers: headers, MessageId: "m", DeliveryTag: 1, Body: []byte("x"), RoutingKey: "orders"})
			ctx := prop.Extract(context.Background(), HeaderCarrier(d.Headers))
			ctx, span := tr.Start(ctx, qs.name, qs.start...)
			_ = mqtest.Chain(mq.HandlerFunc(func(context.Context, *mq.Delivery) error { return nil }), nil).Handle(ctx, d)
			span.SetAttributes(append(end[:0],
				semconv.MessagingRabbitMQDestinationRoutingKey(d.RoutingKey),
				semconv.MessagingRabbitMQMessageDeliveryTag(int(d.DeliveryTag)),
				OutcomeKey.String(string(mq.OutcomeAck)))...)
			span.End()
		})
	})
}

// BenchmarkPublish measures an application's publish through the hooks
// (OnPublish, which starts the span and writes the creation context into
// the headers, and OnPublishDone): an SDK TracerProvider with a batch
// processor and a discarding exporter, a MeterProvider with a ManualReader;
// "unsampled" with a sampler that records nothing.
func BenchmarkPublish(b *testing.B) {
	for _, mode := range []string{"sampled", "unsampled"} {
		b.Run(mode, func(b *testing.B) {
			sampler := sdktrace.AlwaysSample()
			if mode == "unsampled" {
				sampler = sdktrace.NeverSample()
			}
			tp := sdktrace.NewTracerProvider(spanProcessor(), sdktrace.WithSampler(sampler))
			mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
			defer tp.Shutdown(context.Background())
			defer mp.Shutdown(context.Background())
			ins := New(WithTracerProvider(tp), WithMeterProvider(mp), WithPropagators(propagation.TraceContext{}))
			b.ReportAllocs()
			cpuPerOp(b, func() {
				m := mq.Message{MessageId: "m", Headers: amqp.Table{}}
				p := &mq.PublishInfo{RoutingKey: "orders", Mandatory: true, Message: &m, Server: "rabbit.example:5672"}
				ctx := ins.OnPublish(context.Background(), p)
				ins.OnPublishDone(ctx, p, nil)
			})
		})
	}
}
