//go:build integration

package integration

// Consume throughput of the standard stack with otelmq's tracing and
// metrics on, against the same stack without otelmq, in the same run and
// on the same queue. Target (issue 14): at least 0.93x.
//
//	go test -tags integration -run '^$' -bench BenchmarkOtelConsume -benchtime 6x ./integration/

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/acemq/acemq-go/internal/testenv"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/otelmq"
	"github.com/acemq/acemq-go/retry"
	"github.com/acemq/acemq-go/topology"
)

// otelBenchRound is how many messages one timed consumption takes.
const otelBenchRound = 5000

// otelDiscard is a span exporter that drops everything.
type otelDiscard struct{ spans atomic.Int64 }

func (e *otelDiscard) ExportSpans(_ context.Context, s []sdktrace.ReadOnlySpan) error {
	e.spans.Add(int64(len(s)))
	return nil
}
func (*otelDiscard) Shutdown(context.Context) error { return nil }

// BenchmarkOtelConsume consumes rounds of otelBenchRound messages with the
// standard stack (middleware.Standard, logging at info, a handler that
// succeeds) on two brokers: one plain, one with otelmq installed — an SDK
// TracerProvider with a batch span processor and a discarding exporter, a
// MeterProvider with a ManualReader. Before every round the queue is
// filled through the instrumented broker, so both consume the same
// messages, each carrying trace context; the fill's spans are flushed and
// its garbage collected, and the clocks run from the first handler call to
// the last. The order alternates, so drift in the broker hits both alike.
// It reports both throughputs, their ratio and the client's CPU per
// message for each.
func BenchmarkOtelConsume(b *testing.B) {
	for _, prefetch := range []int{10, 100} {
		b.Run(fmt.Sprintf("prefetch=%d", prefetch), func(b *testing.B) { otelBenchConsume(b, prefetch) })
	}
}

func otelBenchConsume(b *testing.B, prefetch int) {
	exp := &otelDiscard{}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	b.Cleanup(func() {
		_ = tp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	})
	ins := otelmq.New(otelmq.WithTracerProvider(tp), otelmq.WithMeterProvider(mp), otelmq.WithPropagators(propagation.TraceContext{}))
	plain := testenv.Broker(b, mq.Config{Logger: consBenchInfo})
	traced := testenv.Broker(b, mq.Config{Logger: consBenchInfo, Hooks: []any{ins}})

	p := retry.Exponential(5, time.Second)
	q := testenv.Queue(b, plain, p, topology.Classic())
	msgs := consBenchMessages(otelBenchRound)
	// Both rounds consume the same messages, published through the
	// instrumented broker: a traceparent header costs any consumer a good
	// part of its throughput by itself, traced or not.
	fill := func() {
		pub := traced.Publisher("")
		defer pub.Close()
		for i := range msgs {
			msgs[i].MessageId = "" // a fresh id each round
			msgs[i].Headers = nil
		}
		if err := pub.PublishBatch(testenv.Context(b, time.Minute), q, msgs); err != nil {
			b.Fatalf("fill: %v", err)
		}
	}
	var plainTotal, tracedTotal, plainCPU, tracedCPU time.Duration
	timed := func(brk *mq.Broker, total, cpuTotal *time.Duration) {
		b.StopTimer()
		fill()
		// The fill's spans and garbage are not the consumer's cost.
		_ = tp.ForceFlush(context.Background())
		runtime.GC()
		b.StartTimer()
		took, cpu := consBenchStandard(b, brk, q, p, prefetch, otelBenchRound)
		*total += took
		*cpuTotal += cpu
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%2 == 0 {
			timed(plain, &plainTotal, &plainCPU)
			timed(traced, &tracedTotal, &tracedCPU)
		} else {
			timed(traced, &tracedTotal, &tracedCPU)
			timed(plain, &plainTotal, &plainCPU)
		}
	}
	b.StopTimer()
	if n, err := testenv.Ready(testenv.Context(b, 10*time.Second), plain, q); err != nil || n != 0 {
		b.Fatalf("%d messages left in the queue (%v)", n, err)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil || len(rm.ScopeMetrics) == 0 {
		b.Fatalf("the instrumented rounds recorded no metrics (%v)", err)
	}
	_ = tp.ForceFlush(context.Background())
	if exp.spans.Load() == 0 {
		b.Fatal("the instrumented rounds exported no spans")
	}
	total := float64(b.N * otelBenchRound)
	plainRate, tracedRate := total/plainTotal.Seconds(), total/tracedTotal.Seconds()
	b.ReportMetric(plainRate, "plain-msg/s")
	b.ReportMetric(tracedRate, "otelmq-msg/s")
	b.ReportMetric(tracedRate/plainRate, "ratio")
	b.ReportMetric(float64(plainCPU.Microseconds())/total, "plain-cpu-µs/msg")
	b.ReportMetric(float64(tracedCPU.Microseconds())/total, "otelmq-cpu-µs/msg")
}
