package main

import (
	"bytes"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// The summary nests each span under its parent: a billing rung publish
// that starts after a shipping span started reads under billing, not
// under shipping.
func TestSummaryNestsSpansUnderTheirParents(t *testing.T) {
	tid := trace.TraceID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	sc := func(n byte) trace.SpanContext {
		return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: trace.SpanID{n}, TraceFlags: trace.FlagsSampled})
	}
	t0 := time.Unix(1700000000, 0)
	span := func(name string, id, parent byte, at time.Duration) sdktrace.ReadOnlySpan {
		s := tracetest.SpanStub{Name: name, SpanContext: sc(id), StartTime: t0.Add(at), EndTime: t0.Add(at + time.Millisecond)}
		if parent != 0 {
			s.Parent = sc(parent)
		}
		return s.Snapshot()
	}
	log := &spanLog{spans: []sdktrace.ReadOnlySpan{
		span("orders-events publish", 1, 0, 0),
		span("shipping.orders process", 2, 1, 1*time.Millisecond),
		span("billing.orders process", 3, 1, 2*time.Millisecond),
		span("billing.orders.retry.1s publish", 4, 3, 3*time.Millisecond),
		span("shipping.orders.dlq publish", 5, 2, 4*time.Millisecond),
	}}
	var b bytes.Buffer
	log.print(&b)
	want := "trace 010203040506\n" +
		"  orders-events publish\n" +
		"    shipping.orders process\n" +
		"      shipping.orders.dlq publish\n" +
		"    billing.orders process\n" +
		"      billing.orders.retry.1s publish\n"
	if b.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", b.String(), want)
	}
}
