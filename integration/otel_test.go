//go:build integration

package integration

// The OpenTelemetry suite (issue 5): one trace across every retry of a
// message, the links-only mode, the metrics, and logs that carry the span.
// Its helpers start with otel.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/metric/metricdata/metricdatatest"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/acemq/acemq-go/internal/testenv"
	"github.com/acemq/acemq-go/middleware"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/otelmq"
	"github.com/acemq/acemq-go/retry"
	"github.com/acemq/acemq-go/topology"
)

// otelPolicy is issue 5's scenario: two in-process waits (50 ms), then two
// 1 s broker rungs, then exhausted. Five attempts in three deliveries.
func otelPolicy() retry.Policy {
	return retry.Waits(50*time.Millisecond, 50*time.Millisecond, time.Second, time.Second).
		With(retry.InProcessLimit(500 * time.Millisecond))
}

// otelRig is a broker instrumented with an Instrumentation that records
// spans and metrics in memory, logging through otelmq.LogHandler to a
// LogRecorder.
type otelRig struct {
	t      *testing.T
	b      *mq.Broker
	spans  *tracetest.SpanRecorder
	reader *sdkmetric.ManualReader
	logs   *testenv.LogRecorder
	log    *slog.Logger // the broker's, wrapped with otelmq.LogHandler
}

func newOtelRig(t *testing.T, opts ...otelmq.Option) *otelRig {
	t.Helper()
	r := &otelRig{t: t, spans: tracetest.NewSpanRecorder(), reader: sdkmetric.NewManualReader(), logs: testenv.NewLogRecorder(t)}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(r.spans))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r.reader))
	t.Cleanup(func() {
		_ = tp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	})
	ins := otelmq.New(append([]otelmq.Option{
		otelmq.WithTracerProvider(tp),
		otelmq.WithMeterProvider(mp),
		otelmq.WithPropagators(propagation.TraceContext{}),
	}, opts...)...)
	r.log = slog.New(otelmq.LogHandler(r.logs))
	r.b = testenv.Broker(t, mq.Config{Logger: r.log, Hooks: []any{ins}})
	return r
}

// queue declares a classic goit.* queue and deletes it, and everything a
// consumer derives from it, when the test ends.
func (r *otelRig) queue(suffix ...string) string {
	r.t.Helper()
	q := testenv.Name(r.t, suffix...)
	testenv.Cleanup(r.t, q, topology.DeadLetterQueue(q), topology.ParkedQueue(q), topology.RungQueue(q, time.Second))
	if err := r.b.Declare(testenv.Context(r.t, 10*time.Second), topology.New().Queue(q, topology.Classic())); err != nil {
		r.t.Fatalf("declare %s: %v", q, err)
	}
	return q
}

func (r *otelRig) publish(q string, m mq.Message) {
	r.t.Helper()
	p := r.b.Publisher("")
	defer p.Close()
	if err := p.Publish(testenv.Context(r.t, 10*time.Second), q, m); err != nil {
		r.t.Fatalf("publish to %s: %v", q, err)
	}
}

func (r *otelRig) consume(q string, h mq.HandlerFunc, opts ...mq.ConsumerOption) *mq.Consumer {
	r.t.Helper()
	c, err := r.b.Consume(testenv.Context(r.t, 10*time.Second), q, h, opts...)
	if err != nil {
		r.t.Fatalf("consume %s: %v", q, err)
	}
	r.t.Cleanup(func() { _ = c.Stop(context.Background()) })
	return c
}

// stop stops c: every delivery's hooks have run when it returns.
func (r *otelRig) stop(c *mq.Consumer) {
	r.t.Helper()
	if err := c.Stop(testenv.Context(r.t, 10*time.Second)); err != nil {
		r.t.Fatalf("stop: %v", err)
	}
}

// waitSpans waits until n spans named name have ended.
func (r *otelRig) waitSpans(name string, n int) {
	r.t.Helper()
	testenv.Eventually(r.t, 30*time.Second, func() bool { return len(otelNamed(r.spans.Ended(), name)) >= n },
		"%d spans named %q", n, name)
}

// get takes the one message in q (auto-ack).
func (r *otelRig) get(q string) amqp.Delivery {
	r.t.Helper()
	ch, err := r.b.Channel(testenv.Context(r.t, 10*time.Second))
	if err != nil {
		r.t.Fatal(err)
	}
	defer ch.Close()
	var d amqp.Delivery
	testenv.Eventually(r.t, 10*time.Second, func() bool {
		var ok bool
		d, ok, err = ch.Get(q, true)
		return ok || err != nil
	}, "a message in %s", q)
	if err != nil {
		r.t.Fatalf("get %s: %v", q, err)
	}
	return d
}

// otelServer is server.address and server.port of the test broker.
func otelServer(t *testing.T) (string, int) {
	u, err := url.Parse(testenv.URL())
	if err != nil {
		t.Fatal(err)
	}
	port := 5672
	if p := u.Port(); p != "" {
		port, _ = strconv.Atoi(p)
	}
	return u.Hostname(), port
}

func otelNamed(spans []sdktrace.ReadOnlySpan, name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

func otelOne(t *testing.T, spans []sdktrace.ReadOnlySpan, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	got := otelNamed(spans, name)
	if len(got) != 1 {
		var all []string
		for _, s := range spans {
			all = append(all, s.Name())
		}
		t.Fatalf("%d spans named %q, want 1; spans: %v", len(got), name, all)
	}
	return got[0]
}

func otelAttrs(kvs []attribute.KeyValue) map[attribute.Key]attribute.Value {
	m := make(map[attribute.Key]attribute.Value, len(kvs))
	for _, kv := range kvs {
		m[kv.Key] = kv.Value
	}
	return m
}

func otelWant(t *testing.T, s sdktrace.ReadOnlySpan, want ...attribute.KeyValue) {
	t.Helper()
	got := otelAttrs(s.Attributes())
	for _, kv := range want {
		if v, ok := got[kv.Key]; !ok || v != kv.Value {
			t.Errorf("%s: %s = %v (present %v), want %v", s.Name(), kv.Key, v.String(), ok, kv.Value.String())
		}
	}
}

func otelLink(s sdktrace.ReadOnlySpan, kind string) (trace.SpanContext, bool) {
	for _, l := range s.Links() {
		if otelAttrs(l.Attributes)[otelmq.LinkKey].AsString() == kind {
			return l.SpanContext, true
		}
	}
	return trace.SpanContext{}, false
}

func otelTraceparent(sc trace.SpanContext) string {
	return fmt.Sprintf("00-%s-%s-%s", sc.TraceID(), sc.SpanID(), sc.TraceFlags())
}

// otelLife runs issue 5's scenario on a fresh queue: one message whose
// handler always fails. It returns the queue and the spans' context seen
// by each call of the handler.
func (r *otelRig) life() (string, []trace.SpanContext) {
	r.t.Helper()
	q := r.queue()
	var (
		mu    sync.Mutex
		calls []trace.SpanContext
	)
	c := r.consume(q, func(ctx context.Context, d *mq.Delivery) error {
		mu.Lock()
		calls = append(calls, trace.SpanContextFromContext(ctx))
		mu.Unlock()
		return fmt.Errorf("attempt %d: %w", d.Attempt(), errors.New("payment service down"))
	}, middleware.Standard(otelPolicy()))
	r.publish(q, mq.Message{Body: []byte("hello"), CorrelationId: "corr-1"})
	r.waitSpans("process "+q, 3)
	r.stop(c)
	mu.Lock()
	defer mu.Unlock()
	return q, slices.Clone(calls)
}

// Issue 5, done when: one message fails twice in-process, twice more via
// broker rungs, and is exhausted. Every span shares one trace: publish →
// process ×3 (each with its attempts, as events) → retry hops →
// dead-letter publish.
func TestOtelMessageLifeIsOneTrace(t *testing.T) {
	r := newOtelRig(t)
	q, calls := r.life()
	rung := topology.RungQueue(q, time.Second)
	dlq := topology.DeadLetterQueue(q)
	host, port := otelServer(t)
	spans := r.spans.Ended()

	publish := otelOne(t, spans, "publish "+q)
	process := otelNamed(spans, "process "+q)
	hops := otelNamed(spans, "publish "+rung)
	dead := otelOne(t, spans, "publish "+dlq)
	if len(process) != 3 || len(hops) != 2 || len(calls) != 5 {
		t.Fatalf("%d process spans, %d retry hops, %d handler calls; want 3, 2, 5", len(process), len(hops), len(calls))
	}
	if len(spans) != 7 {
		t.Errorf("%d spans, want 7 (publish, 3 process, 2 retry hops, 1 dead letter)", len(spans))
	}
	tid := publish.SpanContext().TraceID()
	for _, s := range spans {
		if s.SpanContext().TraceID() != tid {
			t.Errorf("%s is in trace %s, want %s", s.Name(), s.SpanContext().TraceID(), tid)
		}
	}
	otelWant(t, publish,
		attribute.String("messaging.system", "rabbitmq"),
		attribute.String("messaging.operation.name", "publish"),
		attribute.String("messaging.operation.type", "send"),
		attribute.String("messaging.destination.name", q),
		attribute.String("messaging.rabbitmq.destination.routing_key", q),
		attribute.String("messaging.message.conversation_id", "corr-1"),
		attribute.String("server.address", host),
		attribute.Int("server.port", port),
	)
	if publish.SpanKind() != trace.SpanKindProducer || publish.Parent().IsValid() {
		t.Errorf("publish: kind %v, parent %v", publish.SpanKind(), publish.Parent())
	}

	attempts := []int{1, 4, 5}
	outcomes := []string{"retry", "retry", "dead-letter"}
	for i, p := range process {
		if p.SpanKind() != trace.SpanKindConsumer || p.Parent().SpanID() != publish.SpanContext().SpanID() {
			t.Errorf("process %d: kind %v, parent %v; want a consumer child of the publish", i, p.SpanKind(), p.Parent())
		}
		if sc, ok := otelLink(p, "creation"); ok {
			t.Errorf("process %d: a creation link (%v) that only repeats the parent", i, sc)
		}
		if i > 0 {
			if sc, ok := otelLink(p, "hop"); !ok || sc.SpanID() != hops[i-1].SpanContext().SpanID() {
				t.Errorf("process %d: hop link %v (present %v), want the retry hop that caused it", i, sc, ok)
			}
		} else if _, ok := otelLink(p, "hop"); ok {
			t.Errorf("process 0 links to a hop")
		}
		otelWant(t, p,
			attribute.String("messaging.system", "rabbitmq"),
			attribute.String("messaging.operation.name", "process"),
			attribute.String("messaging.operation.type", "process"),
			attribute.String("messaging.destination.name", q),
			attribute.String("messaging.rabbitmq.destination.routing_key", q),
			attribute.String("server.address", host),
			attribute.String("acemq.outcome", outcomes[i]),
			attribute.String("error.type", "_OTHER"),
		)
		// Searchable by attempt (1 included) and message id on every
		// process span, though the publish span carries the id too.
		otelWant(t, p, attribute.Int("acemq.attempt", attempts[i]), attribute.String("messaging.message.id", otelAttrs(publish.Attributes())["messaging.message.id"].AsString()))
		a := otelAttrs(p.Attributes())
		if a["messaging.rabbitmq.message.delivery_tag"].AsInt64() < 1 {
			t.Errorf("process %d: delivery tag %d", i, a["messaging.rabbitmq.message.delivery_tag"].AsInt64())
		}
		// The publish span, the parent, carries the conversation id and
		// server.port.
		for _, k := range []attribute.Key{"messaging.message.conversation_id", "server.port"} {
			if v, ok := a[k]; ok {
				t.Errorf("process %d: %s = %v, want it absent", i, k, v.String())
			}
		}
		if p.Status().Code != codes.Error || !strings.Contains(p.Status().Description, "payment service down") {
			t.Errorf("process %d: status %+v", i, p.Status())
		}
	}
	otelWant(t, process[0], attribute.String("acemq.retry.kind", "broker"), attribute.Int64("acemq.retry.wait_ms", 1000))

	// Each delivery's attempts are events on its process span, each with
	// its number and error; the handler ran in the process span's context.
	wantEvents := [][]string{
		{"acemq.attempt 1", "acemq.retry in-process", "acemq.attempt 2", "acemq.retry in-process", "acemq.attempt 3", "acemq.retry broker"},
		{"acemq.attempt 4", "acemq.retry broker"},
		{"acemq.attempt 5"},
	}
	deliveryOf := map[int]int{1: 0, 2: 0, 3: 0, 4: 1, 5: 2}
	for i, p := range process {
		var got []string
		for _, e := range p.Events() {
			a := otelAttrs(e.Attributes)
			switch e.Name {
			case "acemq.attempt":
				n := a[otelmq.AttemptKey].AsInt64()
				got = append(got, fmt.Sprintf("%s %d", e.Name, n))
				if a["error.type"].AsString() != "_OTHER" || a["exception.message"].AsString() != fmt.Sprintf("attempt %d: payment service down", n) {
					t.Errorf("process %d: attempt event %v", i, e.Attributes)
				}
			case mq.EventRetry:
				got = append(got, fmt.Sprintf("%s %s", e.Name, a[otelmq.RetryKindKey].AsString()))
			default:
				t.Errorf("process %d: unexpected event %s", i, e.Name)
			}
		}
		if !slices.Equal(got, wantEvents[i]) {
			t.Errorf("process %d: events %v, want %v", i, got, wantEvents[i])
		}
	}
	for n := 1; n <= 5; n++ {
		if !calls[n-1].Equal(process[deliveryOf[n]].SpanContext()) {
			t.Errorf("handler call %d ran in %v, want its delivery's process span", n, calls[n-1])
		}
	}
	for i, h := range hops {
		if h.Parent().SpanID() != process[i].SpanContext().SpanID() {
			t.Errorf("retry hop %d: not a child of process %d", i, i)
		}
		otelWant(t, h,
			attribute.String("acemq.hop", "retry"),
			attribute.Int("acemq.attempt", attempts[i+1]),
			attribute.String("acemq.retry.kind", "broker"),
			attribute.Int64("acemq.retry.wait_ms", 1000),
			attribute.String("messaging.destination.name", rung),
		)
	}
	if dead.Parent().SpanID() != process[2].SpanContext().SpanID() {
		t.Errorf("dead-letter hop: not a child of the last process span")
	}
	otelWant(t, dead, attribute.String("acemq.hop", "dead-letter"), attribute.String("acemq.reason", "exhausted"))

	// The dead letter carries the creation context unchanged and points at
	// its own hop.
	m := r.get(dlq)
	if got, want := m.Headers["traceparent"], otelTraceparent(publish.SpanContext()); got != want {
		t.Errorf("dead letter's traceparent %v, want the creation context %s", got, want)
	}
	if got, want := m.Headers[mq.HeaderHopTraceparent], otelTraceparent(dead.SpanContext()); got != want {
		t.Errorf("dead letter's %s %v, want %s", mq.HeaderHopTraceparent, got, want)
	}

	// The library's own records (Logging's acemq.message.settled) carry the
	// process span they were written in.
	settled := r.logs.All("acemq.message.settled")
	if len(settled) != 3 {
		t.Fatalf("%d acemq.message.settled records, want 3", len(settled))
	}
	for i, rec := range settled {
		if rec.Attrs["trace_id"] != tid.String() || rec.Attrs["span_id"] != process[i].SpanContext().SpanID().String() {
			t.Errorf("settled record %d: trace_id %v span_id %v, want %s %s", i, rec.Attrs["trace_id"], rec.Attrs["span_id"], tid, process[i].SpanContext().SpanID())
		}
	}
}

// Links-only: a new trace per delivery, linked to the creation context and
// to the hop that caused it.
func TestOtelLinksOnly(t *testing.T) {
	r := newOtelRig(t, otelmq.WithLinksOnly())
	q, _ := r.life()
	spans := r.spans.Ended()
	publish := otelOne(t, spans, "publish "+q)
	process := otelNamed(spans, "process "+q)
	hops := otelNamed(spans, "publish "+topology.RungQueue(q, time.Second))
	dead := otelOne(t, spans, "publish "+topology.DeadLetterQueue(q))
	if len(process) != 3 || len(hops) != 2 {
		t.Fatalf("%d process spans, %d hops", len(process), len(hops))
	}
	traces := map[trace.TraceID]bool{publish.SpanContext().TraceID(): true}
	for i, p := range process {
		tid := p.SpanContext().TraceID()
		if traces[tid] || p.Parent().IsValid() {
			t.Errorf("process %d: trace %s (seen %v), parent %v; want a new root", i, tid, traces[tid], p.Parent())
		}
		traces[tid] = true
		if sc, ok := otelLink(p, "creation"); !ok || sc.TraceID() != publish.SpanContext().TraceID() || sc.SpanID() != publish.SpanContext().SpanID() {
			t.Errorf("process %d: creation link %v (present %v)", i, sc, ok)
		}
		if i > 0 {
			if sc, ok := otelLink(p, "hop"); !ok || sc.SpanID() != hops[i-1].SpanContext().SpanID() || sc.TraceID() != process[i-1].SpanContext().TraceID() {
				t.Errorf("process %d: hop link %v (present %v)", i, sc, ok)
			}
		}
	}
	for _, s := range spans {
		if s == dead || slices.Contains(hops, s) {
			if !s.Parent().IsValid() || !slices.ContainsFunc(process, func(p sdktrace.ReadOnlySpan) bool {
				return p.SpanContext().SpanID() == s.Parent().SpanID() && p.SpanContext().TraceID() == s.SpanContext().TraceID()
			}) {
				t.Errorf("%s is not a child of a process span in its trace", s.Name())
			}
		}
	}
	if got, want := r.get(topology.DeadLetterQueue(q)).Headers["traceparent"], otelTraceparent(publish.SpanContext()); got != want {
		t.Errorf("traceparent %v, want the creation context %s", got, want)
	}
}

// A record a handler logs with its context carries the process span's ids.
func TestOtelHandlerLogCarriesTheSpan(t *testing.T) {
	r := newOtelRig(t)
	q := r.queue()
	var (
		mu sync.Mutex
		sc trace.SpanContext
	)
	c := r.consume(q, func(ctx context.Context, d *mq.Delivery) error {
		mu.Lock()
		sc = trace.SpanContextFromContext(ctx)
		mu.Unlock()
		r.log.InfoContext(ctx, "goit.handled", "message_id", d.MessageId)
		return nil
	}, middleware.Standard(otelPolicy()))
	r.publish(q, mq.Message{Body: []byte("secret body")})
	r.waitSpans("process "+q, 1)
	r.stop(c)
	process := otelOne(t, r.spans.Ended(), "process "+q)
	mu.Lock()
	defer mu.Unlock()
	if !sc.Equal(process.SpanContext()) {
		t.Fatalf("the handler's context carries %v, want the process span", sc)
	}
	recs := r.logs.All("goit.handled")
	if len(recs) != 1 {
		t.Fatalf("%d records", len(recs))
	}
	if recs[0].Attrs["trace_id"] != sc.TraceID().String() || recs[0].Attrs["span_id"] != sc.SpanID().String() {
		t.Errorf("record %v, want trace_id %s span_id %s", recs[0], sc.TraceID(), sc.SpanID())
	}
	if len(r.logs.Containing("secret body")) > 0 {
		t.Errorf("a message body reached the log")
	}
}

// Every metric's name, unit, kind and attributes, for issue 5's scenario
// and for the two contract events (a missing rung, a failed set-aside).
func TestOtelMetrics(t *testing.T) {
	r := newOtelRig(t)
	host, port := otelServer(t)
	q, _ := r.life()

	// A consumer that declares nothing, on a queue with a .dlq but no rung
	// and no .parked: a retry finds its rung missing (and is dead-lettered
	// instead), a park cannot be set aside: the copy it would have made is
	// kept in q2 naming its target (x-acemq-pending-hop), once, and each
	// time that copy comes back the set-aside is made again (and fails
	// again) and it is requeued, never another call of the handler
	// (docs/contract.md, "Hops"). How often it comes back before the
	// consumer stops is timing: the loop's shape is what is checked, the
	// copy kept once, then one requeue per failed set-aside.
	q2 := r.queue("nodeclare")
	if err := r.b.Declare(testenv.Context(t, 10*time.Second), topology.New().Queue(topology.DeadLetterQueue(q2), topology.Classic())); err != nil {
		t.Fatal(err)
	}
	var parkCalls atomic.Int32
	c := r.consume(q2, func(ctx context.Context, d *mq.Delivery) error {
		if string(d.Body) == "park" {
			parkCalls.Add(1)
			return middleware.Park(errors.New("needs a person"))
		}
		return errors.New("try later")
	}, middleware.Standard(retry.Waits(time.Second).With(retry.InProcessLimit(0)), middleware.WithoutDeclare()),
		mq.WithRequeuePause(50*time.Millisecond))
	r.publish(q2, mq.Message{Body: []byte("retry")})
	r.publish(q2, mq.Message{Body: []byte("park")})
	r.waitSpans("process "+q2, 3)
	r.stop(c)

	var rm metricdata.ResourceMetrics
	if err := r.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != otelmq.ScopeName || sm.Scope.Version != mq.Version {
			t.Errorf("scope %+v", sm.Scope)
		}
		for _, m := range sm.Metrics {
			got[m.Name] = m
		}
	}

	// The handler decided the park once; every return of the message made
	// the set-aside again, each failure reported and requeued once.
	if n := parkCalls.Load(); n != 1 {
		t.Errorf("the handler was called %d times for the message to park, want 1 (Park is never retried)", n)
	}
	asides := int64(0)
	if g, ok := got["acemq.messages.set.aside.failed"].Data.(metricdata.Sum[int64]); ok {
		for _, dp := range g.DataPoints {
			asides += dp.Value
		}
	}
	if asides < 1 {
		t.Fatalf("%d failed set-asides reported, want at least 1", asides)
	}

	sys := attribute.String("messaging.system", "rabbitmq")
	pub := []attribute.KeyValue{sys, attribute.String("messaging.operation.name", "publish"),
		attribute.String("messaging.operation.type", "send"),
		attribute.String("server.address", host), attribute.Int("server.port", port)}
	proc := []attribute.KeyValue{sys, attribute.String("messaging.operation.name", "process"),
		attribute.String("server.address", host), attribute.Int("server.port", port)}
	dest := func(d string) attribute.KeyValue { return attribute.String("messaging.destination.name", d) }
	hop := func(h string) attribute.KeyValue { return attribute.String("acemq.hop", h) }
	et := func(e string) attribute.KeyValue { return attribute.String("error.type", e) }
	with := func(base []attribute.KeyValue, kvs ...attribute.KeyValue) []attribute.KeyValue {
		return append(slices.Clone(base), kvs...)
	}

	type pt struct {
		n     int64
		attrs []attribute.KeyValue
	}
	sent := []pt{
		{1, with(pub, dest(q))},
		{2, with(pub, dest(topology.RungQueue(q, time.Second)), hop("retry"))},
		{1, with(pub, dest(topology.DeadLetterQueue(q)), hop("dead-letter"))},
		{2, with(pub, dest(q2))},
		{1, with(pub, dest(topology.RungQueue(q2, time.Second)), hop("retry"), et("unroutable"))},
		{1, with(pub, dest(topology.DeadLetterQueue(q2)), hop("dead-letter"))},
		{asides, with(pub, dest(topology.ParkedQueue(q2)), hop("park"), et("unroutable"))},
		{1, with(pub, dest(q2), hop("requeue"))}, // the park's copy, kept pending in q2
	}
	processed := []pt{
		{3, with(proc, dest(q), et("_OTHER"))},
		// The retry, dead-lettered, and the park, whose copy was kept in
		// q2: both settled for the handler's error.
		{2, with(proc, dest(q2), et("_OTHER"))},
		{asides - 1, with(proc, dest(q2), et("unroutable"))}, // the copy, requeued each time
	}
	sums := map[string][]pt{
		"messaging.client.sent.messages":     sent,
		"messaging.client.consumed.messages": {{3, with(proc, dest(q))}, {1 + asides, with(proc, dest(q2))}},
		"acemq.retries": {
			{2, []attribute.KeyValue{sys, dest(q), attribute.String("acemq.retry.kind", "in-process")}},
			{2, []attribute.KeyValue{sys, dest(q), attribute.String("acemq.retry.kind", "broker")}},
		},
		"acemq.message.outcomes": {
			{2, []attribute.KeyValue{sys, dest(q), attribute.String("acemq.outcome", "retry")}},
			{1, []attribute.KeyValue{sys, dest(q), attribute.String("acemq.outcome", "dead-letter")}},
			{1, []attribute.KeyValue{sys, dest(q2), attribute.String("acemq.outcome", "dead-letter")}},
			{asides, []attribute.KeyValue{sys, dest(q2), attribute.String("acemq.outcome", "requeue")}},
		},
		"acemq.retry.rung.missing":        {{1, []attribute.KeyValue{sys, dest(q2)}}},
		"acemq.messages.set.aside.failed": {{asides, []attribute.KeyValue{sys, dest(q2)}}},
		"acemq.message.requeues": {
			{1, []attribute.KeyValue{sys, dest(q2), attribute.String("acemq.requeue.reason", "carried")}},
			{asides - 1, []attribute.KeyValue{sys, dest(q2), attribute.String("acemq.requeue.reason", "requeued")}},
		},
	}
	hists := map[string][]pt{
		"messaging.client.operation.duration": sent,
		"messaging.process.duration":          processed,
	}
	units := map[string]string{
		"messaging.client.sent.messages":      "{message}",
		"messaging.client.consumed.messages":  "{message}",
		"acemq.retries":                       "{retry}",
		"acemq.message.outcomes":              "{message}",
		"acemq.retry.rung.missing":            "{message}",
		"acemq.messages.set.aside.failed":     "{message}",
		"acemq.message.requeues":              "{message}",
		"messaging.client.operation.duration": "s",
		"messaging.process.duration":          "s",
	}
	if len(got) != len(units) {
		t.Errorf("%d metrics, want %d", len(got), len(units))
	}
	buckets := []float64{0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10}
	for name, pts := range sums {
		g, ok := got[name]
		if !ok {
			t.Errorf("no metric %s", name)
			continue
		}
		want := metricdata.Sum[int64]{Temporality: metricdata.CumulativeTemporality, IsMonotonic: true}
		for _, p := range pts {
			want.DataPoints = append(want.DataPoints, metricdata.DataPoint[int64]{Attributes: attribute.NewSet(p.attrs...), Value: p.n})
		}
		metricdatatest.AssertEqual(t, metricdata.Metrics{Name: name, Unit: units[name], Description: g.Description, Data: want}, g,
			metricdatatest.IgnoreTimestamp(), metricdatatest.IgnoreExemplars())
		if g.Description == "" {
			t.Errorf("%s has no description", name)
		}
	}
	for name, pts := range hists {
		g, ok := got[name]
		if !ok {
			t.Errorf("no metric %s", name)
			continue
		}
		want := metricdata.Histogram[float64]{Temporality: metricdata.CumulativeTemporality}
		for _, p := range pts {
			want.DataPoints = append(want.DataPoints, metricdata.HistogramDataPoint[float64]{Attributes: attribute.NewSet(p.attrs...)})
		}
		metricdatatest.AssertEqual(t, metricdata.Metrics{Name: name, Unit: units[name], Description: g.Description, Data: want}, g,
			metricdatatest.IgnoreTimestamp(), metricdatatest.IgnoreValue(), metricdatatest.IgnoreExemplars())
		h, _ := g.Data.(metricdata.Histogram[float64])
		for _, dp := range h.DataPoints {
			if !slices.Equal(dp.Bounds, buckets) {
				t.Errorf("%s: bounds %v, want the conventions' %v", name, dp.Bounds, buckets)
			}
			for _, p := range pts {
				if set := attribute.NewSet(p.attrs...); set.Equals(&dp.Attributes) && dp.Count != uint64(p.n) {
					t.Errorf("%s %s: count %d, want %d", name, dp.Attributes.Encoded(attribute.DefaultEncoder()), dp.Count, p.n)
				}
			}
		}
	}
}
