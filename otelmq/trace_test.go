package otelmq_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/mqtest"
	"github.com/acemq/acemq-go/otelmq"
)

// life runs the scenario of issue 5 against the fake broker: one message,
// published by the application, fails three times in the first delivery
// (two in-process retries), goes to the 1 s rung, fails again on its
// second delivery, goes to the rung again, fails on the third and is dead
// lettered. It returns the traceparent the application's publish wrote.
func (r *rig) life() string {
	r.t.Helper()
	if err := r.publish(context.Background(), "", "orders", mq.Message{Body: []byte("hello"), CorrelationId: "corr-1"}, "", nil); err != nil {
		r.t.Fatal(err)
	}
	tp, _ := r.queues["orders"][0].Headers["traceparent"].(string)
	if tp == "" {
		r.t.Fatalf("the application's publish wrote no traceparent: %v", r.queues["orders"][0].Headers)
	}
	r.deliver(r.next("orders"), failing, 2, mq.OutcomeRetry, "orders.retry.1s")
	r.expire("orders.retry.1s", "orders")
	r.deliver(r.next("orders"), failing, 0, mq.OutcomeRetry, "orders.retry.1s")
	r.expire("orders.retry.1s", "orders")
	r.deliver(r.next("orders"), failing, 0, mq.OutcomeDeadLetter, "orders.dlq")
	return tp
}

// expire moves a rung's messages home, as the broker does when their TTL
// ends.
func (r *rig) expire(rung, home string) {
	r.queues[home] = append(r.queues[home], r.queues[rung]...)
	r.queues[rung] = nil
}

func byName(spans []sdktrace.ReadOnlySpan, name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

func one(t *testing.T, spans []sdktrace.ReadOnlySpan, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	got := byName(spans, name)
	if len(got) != 1 {
		t.Fatalf("%d spans named %q, want 1; spans: %v", len(got), name, names(spans))
	}
	return got[0]
}

func names(spans []sdktrace.ReadOnlySpan) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name())
	}
	return out
}

func traceparentOf(sc trace.SpanContext) string {
	return fmt.Sprintf("00-%s-%s-%s", sc.TraceID(), sc.SpanID(), sc.TraceFlags())
}

func wantAttrs(t *testing.T, s sdktrace.ReadOnlySpan, want ...attribute.KeyValue) {
	t.Helper()
	got := attrs(s.Attributes())
	for _, kv := range want {
		if v, ok := got[kv.Key]; !ok || v != kv.Value {
			t.Errorf("%s: %s = %v (present %v), want %v", s.Name(), kv.Key, v.String(), ok, kv.Value.String())
		}
	}
}

func wantNoAttr(t *testing.T, s sdktrace.ReadOnlySpan, keys ...attribute.Key) {
	t.Helper()
	got := attrs(s.Attributes())
	for _, k := range keys {
		if v, ok := got[k]; ok {
			t.Errorf("%s: %s = %v, want it absent", s.Name(), k, v.String())
		}
	}
}

func linkTo(s sdktrace.ReadOnlySpan, kind string) (trace.SpanContext, bool) {
	for _, l := range s.Links() {
		if attrs(l.Attributes)[otelmq.LinkKey].AsString() == kind {
			return l.SpanContext, true
		}
	}
	return trace.SpanContext{}, false
}

func TestMessageLifeIsOneTrace(t *testing.T) {
	r := newRig(t)
	created := r.life()
	spans := r.spans.Ended()
	if len(spans) != 7 {
		t.Fatalf("%d spans, want 7 (publish, 3 process, 2 retry hops, 1 dead letter): %v", len(spans), names(spans))
	}

	publish := one(t, spans, "publish orders")
	tid := publish.SpanContext().TraceID()
	for _, s := range spans {
		if s.SpanContext().TraceID() != tid {
			t.Errorf("%s is in trace %s, want %s", s.Name(), s.SpanContext().TraceID(), tid)
		}
	}
	if created != traceparentOf(publish.SpanContext()) {
		t.Errorf("traceparent %s, want the publish span's %s", created, traceparentOf(publish.SpanContext()))
	}
	if publish.SpanKind() != trace.SpanKindProducer || publish.Parent().IsValid() {
		t.Errorf("publish: kind %v parent %v, want a producer root", publish.SpanKind(), publish.Parent())
	}
	if publish.InstrumentationScope().Name != otelmq.ScopeName || publish.InstrumentationScope().Version != mq.Version {
		t.Errorf("scope %+v", publish.InstrumentationScope())
	}
	wantAttrs(t, publish,
		attribute.String("messaging.system", "rabbitmq"),
		attribute.String("messaging.operation.name", "publish"),
		attribute.String("messaging.operation.type", "send"),
		attribute.String("messaging.destination.name", "orders"),
		attribute.String("messaging.rabbitmq.destination.routing_key", "orders"),
		attribute.String("messaging.message.conversation_id", "corr-1"),
		attribute.String("server.address", "rabbit.example"),
		attribute.Int("server.port", 5672),
	)
	wantNoAttr(t, publish, otelmq.HopKey)

	process := byName(spans, "process orders")
	if len(process) != 3 {
		t.Fatalf("%d process spans, want 3", len(process))
	}
	hops := byName(spans, "publish orders.retry.1s")
	if len(hops) != 2 {
		t.Fatalf("%d retry hop spans, want 2", len(hops))
	}
	dlq := one(t, spans, "publish orders.dlq")

	wantAttempt := []int{1, 4, 5}
	wantOutcome := []string{"retry", "retry", "dead-letter"}
	for i, p := range process {
		if p.SpanKind() != trace.SpanKindConsumer {
			t.Errorf("process %d: kind %v", i, p.SpanKind())
		}
		if p.Parent().SpanID() != publish.SpanContext().SpanID() {
			t.Errorf("process %d: parent %s, want the creation context (publish span %s)", i, p.Parent().SpanID(), publish.SpanContext().SpanID())
		}
		if sc, ok := linkTo(p, "creation"); ok {
			t.Errorf("process %d: a creation link (%v) that only repeats the parent", i, sc)
		}
		hop, ok := linkTo(p, "hop")
		switch {
		case i == 0 && ok:
			t.Errorf("process 0 links to a hop (%v): the first delivery has none", hop)
		case i > 0 && (!ok || hop.SpanID() != hops[i-1].SpanContext().SpanID()):
			t.Errorf("process %d: hop link %v (present %v), want the hop span %v", i, hop, ok, hops[i-1].SpanContext())
		}
		wantAttrs(t, p,
			attribute.String("messaging.system", "rabbitmq"),
			attribute.String("messaging.operation.name", "process"),
			attribute.String("messaging.operation.type", "process"),
			attribute.String("messaging.destination.name", "orders"),
			attribute.String("messaging.rabbitmq.destination.routing_key", "orders"),
			attribute.Int("messaging.rabbitmq.message.delivery_tag", i+1),
			attribute.String("acemq.outcome", wantOutcome[i]),
			attribute.String("error.type", "_OTHER"),
		)
		// Searchable by attempt (1 included) and by message id, though the
		// publish span, the parent, carries the id too (issue 24, item 5).
		wantAttrs(t, p, attribute.Int("acemq.attempt", wantAttempt[i]), attribute.String("messaging.message.id", attrs(publish.Attributes())["messaging.message.id"].AsString()))
		wantNoAttr(t, p, "messaging.message.conversation_id")
		if p.Status().Code != codes.Error || p.Status().Description != "boom" {
			t.Errorf("process %d: status %+v, want Error boom", i, p.Status())
		}
		if i < 2 {
			wantAttrs(t, p, attribute.String("acemq.retry.kind", "broker"), attribute.Int64("acemq.retry.wait_ms", 1000))
		}
	}
	// Each delivery's events: its attempts, each failed, and the retries.
	wantEvents := [][]string{
		{"acemq.attempt 1", "acemq.retry in-process", "acemq.attempt 2", "acemq.retry in-process", "acemq.attempt 3", "acemq.retry broker"},
		{"acemq.attempt 4", "acemq.retry broker"},
		{"acemq.attempt 5"},
	}
	for i, p := range process {
		var got []string
		for _, e := range p.Events() {
			a := attrs(e.Attributes)
			switch e.Name {
			case "acemq.attempt":
				got = append(got, fmt.Sprintf("%s %d", e.Name, a[otelmq.AttemptKey].AsInt64()))
				if a["error.type"].AsString() != "_OTHER" || a["exception.message"].AsString() != "boom" {
					t.Errorf("process %d: attempt event %v, want error.type _OTHER and the error's text", i, e.Attributes)
				}
			case mq.EventRetry:
				got = append(got, fmt.Sprintf("%s %s", e.Name, a[otelmq.RetryKindKey].AsString()))
				if a[otelmq.RetryWaitKey].AsInt64() == 0 {
					t.Errorf("process %d: retry event without a wait: %v", i, e.Attributes)
				}
			default:
				t.Errorf("process %d: unexpected event %s", i, e.Name)
			}
		}
		if !slices.Equal(got, wantEvents[i]) {
			t.Errorf("process %d: events %v, want %v", i, got, wantEvents[i])
		}
	}

	// Hops: children of the process span that made them.
	for i, h := range hops {
		if h.Parent().SpanID() != process[i].SpanContext().SpanID() || h.SpanKind() != trace.SpanKindProducer {
			t.Errorf("retry hop %d: parent %s kind %v, want process %d %s, producer", i, h.Parent().SpanID(), h.SpanKind(), i, process[i].SpanContext().SpanID())
		}
		wantAttrs(t, h,
			attribute.String("messaging.destination.name", "orders.retry.1s"),
			attribute.String("acemq.hop", "retry"),
			attribute.Int("acemq.attempt", wantAttempt[i+1]),
			attribute.String("acemq.retry.kind", "broker"),
			attribute.Int64("acemq.retry.wait_ms", 1000),
		)
	}
	if dlq.Parent().SpanID() != process[2].SpanContext().SpanID() {
		t.Errorf("dead-letter hop: parent %s, want process 2", dlq.Parent().SpanID())
	}
	wantAttrs(t, dlq, attribute.String("acemq.hop", "dead-letter"), attribute.String("acemq.reason", "exhausted"), attribute.Int("acemq.attempt", 6))
	wantNoAttr(t, dlq, otelmq.RetryKindKey)

	// The dead letter still carries the creation context, and the hop
	// header points at the dead-letter hop.
	h := r.queues["orders.dlq"][0].Headers
	if h["traceparent"] != created {
		t.Errorf("dead letter's traceparent %v, want the creation context %s: a hop overwrote it", h["traceparent"], created)
	}
	if h[mq.HeaderHopTraceparent] != traceparentOf(dlq.SpanContext()) {
		t.Errorf("dead letter's %s %v, want the dead-letter hop %s", mq.HeaderHopTraceparent, h[mq.HeaderHopTraceparent], traceparentOf(dlq.SpanContext()))
	}
}

func TestLinksOnly(t *testing.T) {
	r := newRig(t, otelmq.WithLinksOnly())
	created := r.life()
	spans := r.spans.Ended()
	publish := one(t, spans, "publish orders")
	process := byName(spans, "process orders")
	hops := byName(spans, "publish orders.retry.1s")
	dlq := one(t, spans, "publish orders.dlq")
	if len(process) != 3 || len(hops) != 2 {
		t.Fatalf("spans: %v", names(spans))
	}
	seen := map[trace.TraceID]bool{publish.SpanContext().TraceID(): true}
	for i, p := range process {
		tid := p.SpanContext().TraceID()
		if seen[tid] {
			t.Errorf("process %d shares trace %s: links-only starts a new trace per delivery", i, tid)
		}
		seen[tid] = true
		if p.Parent().IsValid() {
			t.Errorf("process %d has parent %v, want a root", i, p.Parent())
		}
		if attrs(p.Attributes())["messaging.message.id"].AsString() == "" {
			t.Errorf("process %d: no messaging.message.id on a span outside its publish's trace", i)
		}
		if sc, ok := linkTo(p, "creation"); !ok || sc.SpanID() != publish.SpanContext().SpanID() || sc.TraceID() != publish.SpanContext().TraceID() {
			t.Errorf("process %d: creation link %v (present %v), want the publish span", i, sc, ok)
		}
		if i > 0 {
			if sc, ok := linkTo(p, "hop"); !ok || sc.SpanID() != hops[i-1].SpanContext().SpanID() || sc.TraceID() != process[i-1].SpanContext().TraceID() {
				t.Errorf("process %d: hop link %v (present %v), want hop %v", i, sc, ok, hops[i-1].SpanContext())
			}
		}
	}
	// Hops live in their delivery's trace.
	for i, h := range hops {
		if h.Parent().SpanID() != process[i].SpanContext().SpanID() {
			t.Errorf("hop %d is not a child of process %d", i, i)
		}
	}
	if dlq.Parent().SpanID() != process[2].SpanContext().SpanID() {
		t.Errorf("dead-letter hop is not a child of process 2")
	}
	if got := r.queues["orders.dlq"][0].Headers["traceparent"]; got != created {
		t.Errorf("traceparent %v, want the creation context %s", got, created)
	}
}

// Other languages write header values as bytes.
func TestDeliveryReadsBytesHeaders(t *testing.T) {
	r := newRig(t)
	creation := "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	hop := "00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01"
	d := mqtest.NewDelivery("orders", amqp.Delivery{Headers: amqp.Table{
		"traceparent":           []byte(creation),
		"tracestate":            []byte("vendor=x"),
		mq.HeaderHopTraceparent: []byte(hop),
		mq.HeaderAttempt:        []byte("3"),
	}})
	r.deliver(d, func(context.Context, *mq.Delivery) error { return nil }, 0, "", "")
	p := one(t, r.spans.Ended(), "process orders")
	if got := traceparentOf(p.Parent()); got != creation {
		t.Errorf("parent %s, want %s", got, creation)
	}
	if p.Parent().TraceState().Get("vendor") != "x" {
		t.Errorf("tracestate %v, want vendor=x", p.Parent().TraceState())
	}
	if sc, ok := linkTo(p, "hop"); !ok || traceparentOf(sc) != hop {
		t.Errorf("hop link %v (present %v), want %s", sc, ok, hop)
	}
	wantAttrs(t, p, attribute.Int("acemq.attempt", 3), attribute.String("acemq.outcome", "ack"))
	wantNoAttr(t, p, "error.type")
	if p.Status().Code != codes.Unset {
		t.Errorf("status %+v, want unset for an ack", p.Status())
	}
}

// A message published without instrumentation has no creation context:
// its first hop writes one, so later deliveries share a trace.
func TestUninstrumentedProducer(t *testing.T) {
	r := newRig(t)
	r.queues["orders"] = []mq.Message{{MessageId: "m1", Headers: amqp.Table{}}}
	r.deliver(r.next("orders"), failing, 0, mq.OutcomeRetry, "orders.retry.1s")
	r.expire("orders.retry.1s", "orders")
	r.deliver(r.next("orders"), func(context.Context, *mq.Delivery) error { return nil }, 0, "", "")
	spans := r.spans.Ended()
	process := byName(spans, "process orders")
	hop := one(t, spans, "publish orders.retry.1s")
	if len(process) != 2 {
		t.Fatalf("spans: %v", names(spans))
	}
	if process[0].Parent().IsValid() {
		t.Errorf("first delivery has parent %v, want a root", process[0].Parent())
	}
	if process[1].Parent().SpanID() != hop.SpanContext().SpanID() || process[1].SpanContext().TraceID() != process[0].SpanContext().TraceID() {
		t.Errorf("second delivery: parent %v, want the first hop %v in the first delivery's trace", process[1].Parent(), hop.SpanContext())
	}
}

// A hop made outside any span (a replay tool) joins the message's trace.
func TestReplayJoinsTheMessageTrace(t *testing.T) {
	r := newRig(t)
	if err := r.publish(context.Background(), "", "orders", mq.Message{}, "", nil); err != nil {
		t.Fatal(err)
	}
	m := r.queues["orders"][0]
	if err := r.publish(context.Background(), "", "orders", m, mq.OutcomeReplay, nil); err != nil {
		t.Fatal(err)
	}
	spans := r.spans.Ended()
	pub := spans[0]
	replay := spans[1]
	if replay.Parent().SpanID() != pub.SpanContext().SpanID() || replay.SpanContext().TraceID() != pub.SpanContext().TraceID() {
		t.Errorf("replay: parent %v, want the creation context %v", replay.Parent(), pub.SpanContext())
	}
	wantAttrs(t, replay, attribute.String("acemq.hop", "replay"))
	if r.queues["orders"][1].Headers["traceparent"] != m.Headers["traceparent"] {
		t.Errorf("the replay overwrote traceparent")
	}
}

// What a handler does is nested under its delivery: its own spans, and
// publishes, whose messages get a creation context of their own.
func TestHandlerWorkNestsUnderTheDelivery(t *testing.T) {
	r := newRig(t)
	r.queues["orders"] = []mq.Message{{MessageId: "m1", Headers: amqp.Table{}}}
	r.deliver(r.next("orders"), func(ctx context.Context, d *mq.Delivery) error {
		return r.publish(ctx, "shipping", "order.placed", mq.Message{Body: []byte("x")}, "", nil)
	}, 0, "", "")
	spans := r.spans.Ended()
	process := one(t, spans, "process orders")
	pub := one(t, spans, "publish shipping")
	if pub.Parent().SpanID() != process.SpanContext().SpanID() {
		t.Errorf("publish from a handler: parent %v, want the process span", pub.Parent())
	}
	wantAttrs(t, pub,
		attribute.String("messaging.destination.name", "shipping"),
		attribute.String("messaging.rabbitmq.destination.routing_key", "order.placed"))
	if got := r.queues["order.placed"][0].Headers["traceparent"]; got != traceparentOf(pub.SpanContext()) {
		t.Errorf("traceparent %v, want the new message's publish span", got)
	}
}

func TestPublishFailure(t *testing.T) {
	r := newRig(t)
	err := fmt.Errorf("mq: publish to queue %q: %w", "nowhere", mq.ErrUnroutable)
	_ = r.publish(context.Background(), "", "nowhere", mq.Message{}, "", err)
	s := one(t, r.spans.Ended(), "publish nowhere")
	if s.Status().Code != codes.Error || !strings.Contains(s.Status().Description, "unroutable") {
		t.Errorf("status %+v", s.Status())
	}
	wantAttrs(t, s, attribute.String("error.type", "unroutable"))
}

func TestEmptyDestinationAndNilMessage(t *testing.T) {
	r := newRig(t)
	p := &mq.PublishInfo{}
	r.ins.OnPublishDone(r.ins.OnPublish(context.Background(), p), p, nil)
	one(t, r.spans.Ended(), "publish amq.default")
	// Hooks tolerate contexts they did not make.
	r.ins.OnPublishDone(context.Background(), p, nil)
	d := mqtest.NewDelivery("q", amqp.Delivery{})
	r.ins.OnDeliveryDone(context.Background(), d, nil)
	r.ins.OnAttemptDone(context.Background(), d, nil)
	r.ins.OnEvent(context.Background(), mq.Event{Name: mq.EventConnectionLost})
}

func TestDefaultsAreTheGlobals(t *testing.T) {
	ins := otelmq.New(nil, otelmq.WithTracerProvider(nil), otelmq.WithMeterProvider(nil), otelmq.WithPropagators(nil))
	p := &mq.PublishInfo{RoutingKey: "q", Message: &mq.Message{Headers: amqp.Table{}}}
	ins.OnPublishDone(ins.OnPublish(context.Background(), p), p, nil)
	if len(p.Message.Headers) != 0 {
		t.Errorf("the global (no-op) propagator wrote %v", p.Message.Headers)
	}
	d := mqtest.NewDelivery("q", amqp.Delivery{Headers: p.Message.Headers})
	ctx := ins.OnDelivery(context.Background(), d)
	ins.OnDeliveryDone(ctx, d, nil)
}

// Hooks are called from many consumers' goroutines at once.
func TestConcurrentUse(t *testing.T) {
	r := newRig(t)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 50 {
				m := mq.Message{Headers: amqp.Table{}}
				p := &mq.PublishInfo{RoutingKey: "q", Message: &m, Server: server}
				r.ins.OnPublishDone(r.ins.OnPublish(context.Background(), p), p, nil)
				d := mqtest.NewDelivery("q", amqp.Delivery{Headers: m.Headers, DeliveryTag: uint64(i*100 + j)})
				ctx := r.ins.OnDelivery(context.Background(), d)
				h := mqtest.Chain(mq.HandlerFunc(func(context.Context, *mq.Delivery) error { return nil }), []mq.AttemptHook{r.ins})
				_ = h.Handle(ctx, d)
				r.ins.OnEvent(ctx, mq.Event{Name: mq.EventRetry, Queue: "q", Kind: "in-process"})
				r.ins.OnDeliveryDone(ctx, d, nil)
			}
		}()
	}
	wg.Wait()
	if n := len(r.spans.Ended()); n != 8*50*2 {
		t.Errorf("%d spans, want %d", n, 8*50*2)
	}
	_ = r.collect()
}

func TestHeaderCarrier(t *testing.T) {
	h := amqp.Table{"traceparent": "a", "tracestate": []byte("b"), "x-number": int32(3), "Baggage": "k=v"}
	c := otelmq.HeaderCarrier(h)
	for key, want := range map[string]string{"traceparent": "a", "tracestate": "b", "x-number": "", "missing": "", "baggage": "k=v"} {
		if got := c.Get(key); got != want {
			t.Errorf("Get(%q) = %q, want %q", key, got, want)
		}
	}
	c.Set("traceparent", "new")
	if h["traceparent"] != "new" {
		t.Errorf("Set wrote %v", h["traceparent"])
	}
	keys := c.Keys()
	slices.Sort(keys)
	if !slices.Equal(keys, []string{"Baggage", "traceparent", "tracestate", "x-number"}) {
		t.Errorf("Keys() = %v", keys)
	}

	// A round trip through the W3C propagator.
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5, 6}, TraceFlags: trace.FlagsSampled,
	})
	out := amqp.Table{}
	propagation.TraceContext{}.Inject(trace.ContextWithSpanContext(context.Background(), sc), otelmq.HeaderCarrier(out))
	got := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), otelmq.HeaderCarrier(out)))
	if !got.Equal(sc.WithRemote(true)) {
		t.Errorf("round trip: %v, want %v", got, sc)
	}
}

// Nothing breaks when spans are sampled out (non-recording spans), and the
// sampling decision still travels with the message.
func TestSampledOut(t *testing.T) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()), sdktrace.WithSpanProcessor(sr))
	r := newRig(t, otelmq.WithTracerProvider(tp))
	r.life()
	r.queues["orders"] = []mq.Message{{MessageId: "m2", Headers: amqp.Table{}}}
	r.deliver(r.next("orders"), failing, 1, mq.OutcomePark, "orders.parked")
	if n := len(sr.Ended()); n != 0 {
		t.Errorf("%d spans recorded with NeverSample", n)
	}
	tp2 := r.queues["orders.dlq"][0].Headers["traceparent"].(string)
	if !strings.HasSuffix(tp2, "-00") {
		t.Errorf("traceparent %s does not carry the not-sampled flag", tp2)
	}
	if got := r.collect(); len(got["acemq.message.outcomes"].Name) == 0 {
		t.Errorf("metrics depend on sampling: %v", got)
	}
}

// A middleware that starts spans of its own between the process span and
// the handler does not move the attempts off the process span.
func TestAttemptsStayOnTheProcessSpan(t *testing.T) {
	r := newRig(t)
	tp := sdktrace.NewTracerProvider()
	d := mqtest.NewDelivery("orders", amqp.Delivery{})
	ctx := r.ins.OnDelivery(context.Background(), d)
	mctx, mspan := tp.Tracer("middleware").Start(ctx, "middleware")
	h := mqtest.Chain(mq.HandlerFunc(func(context.Context, *mq.Delivery) error { return nil }), []mq.AttemptHook{r.ins})
	_ = h.Handle(mctx, d)
	mspan.End()
	r.ins.OnDeliveryDone(ctx, d, nil)
	p := one(t, r.spans.Ended(), "process orders")
	if len(p.Events()) != 0 {
		t.Errorf("process span events %v, want none for a first attempt that succeeded", p.Events())
	}
}

// Attempts that fail are events, and so is the one that succeeds after
// them; a first attempt that succeeds is not.
func TestAttemptEvents(t *testing.T) {
	r := newRig(t)
	r.queues["orders"] = []mq.Message{{MessageId: "m1", Headers: amqp.Table{}}}
	r.deliver(r.next("orders"), func(_ context.Context, d *mq.Delivery) error {
		if d.Attempt() < 3 {
			return fmt.Errorf("attempt %d: %w", d.Attempt(), mq.ErrUnroutable)
		}
		return nil
	}, 5, "", "")
	p := one(t, r.spans.Ended(), "process orders")
	var got []string
	for _, e := range p.Events() {
		a := attrs(e.Attributes)
		got = append(got, fmt.Sprintf("%s %d %s %s", e.Name, a[otelmq.AttemptKey].AsInt64(), a["error.type"].AsString(), a["exception.message"].AsString()))
	}
	want := []string{
		"acemq.attempt 1 unroutable attempt 1: mq: unroutable",
		"acemq.retry 1 unroutable ",
		"acemq.attempt 2 unroutable attempt 2: mq: unroutable",
		"acemq.retry 2 unroutable ",
		"acemq.attempt 3  ",
	}
	if !slices.Equal(got, want) {
		t.Errorf("events\n%q\nwant\n%q", got, want)
	}
	// No trace context to join: the span carries the message's id itself.
	wantAttrs(t, p, attribute.String("acemq.outcome", "ack"), attribute.String("messaging.message.id", "m1"), attribute.Int("acemq.attempt", 1))
	wantNoAttr(t, p, "error.type")
}

// The common delivery — a first attempt, acknowledged, in the trace of its
// publish — carries the message id and acemq.attempt (operators search by
// both; the publish span may be in another backend), and leaves the
// conversation id and server.port to the publish span. Ten attributes with
// a real server: the SDK then builds its de-duplication map (the cost is in
// the package documentation).
func TestCommonDeliveryIsSearchable(t *testing.T) {
	r := newRig(t)
	if err := r.publish(context.Background(), "", "orders", mq.Message{MessageId: "m1", CorrelationId: "c1", Headers: amqp.Table{}}, "", nil); err != nil {
		t.Fatal(err)
	}
	r.deliver(r.next("orders"), func(context.Context, *mq.Delivery) error { return nil }, 0, "", "")
	spans := r.spans.Ended()
	publish, p := one(t, spans, "publish orders"), one(t, spans, "process orders")
	if p.Parent().SpanID() != publish.SpanContext().SpanID() {
		t.Fatalf("process parent %v, want the publish span", p.Parent())
	}
	wantAttrs(t, publish, attribute.String("messaging.message.id", "m1"), attribute.String("messaging.message.conversation_id", "c1"))
	wantAttrs(t, p,
		attribute.String("messaging.system", "rabbitmq"),
		attribute.String("messaging.operation.name", "process"),
		attribute.String("messaging.operation.type", "process"),
		attribute.String("messaging.destination.name", "orders"),
		attribute.String("messaging.rabbitmq.destination.routing_key", "orders"),
		attribute.Int("messaging.rabbitmq.message.delivery_tag", 1),
		attribute.String("messaging.message.id", "m1"),
		attribute.Int("acemq.attempt", 1),
		attribute.String("acemq.outcome", "ack"),
	)
	wantNoAttr(t, p, "messaging.message.conversation_id", "server.port")
	// The rig's deliveries have no server; a real one adds server.address.
	if n := len(p.Attributes()); n != 9 {
		t.Errorf("%d attributes, want 9 here (10 with server.address): %v", n, p.Attributes())
	}
}

// OnDeliveryDone builds the attributes it sets in a buffer shared through
// a pool: deliveries ended at once, on many goroutines, each failing or
// not, must each end with their own routing key, delivery tag, outcome
// and error.type, and with nothing left from another delivery's buffer.
func TestConcurrentDeliveriesKeepTheirOwnAttributes(t *testing.T) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	defer tp.Shutdown(context.Background())
	ins := otelmq.New(otelmq.WithTracerProvider(tp), otelmq.WithMeterProvider(metricnoop.NewMeterProvider()))
	const workers, each = 8, 200
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				tag := uint64(w*each + i + 1)
				raw := amqp.Delivery{DeliveryTag: tag, RoutingKey: "rk-" + strconv.FormatUint(tag, 10)}
				if tag%3 == 0 {
					raw.MessageId = "m-" + strconv.FormatUint(tag, 10) // not parented: the id goes on the span
				}
				d := mqtest.NewDelivery("orders", raw)
				ctx := ins.OnDelivery(context.Background(), d)
				var result error
				if tag%2 == 0 {
					result = errBoom
				}
				err := mqtest.Chain(mq.HandlerFunc(func(context.Context, *mq.Delivery) error { return result }), nil).Handle(ctx, d)
				ins.OnDeliveryDone(ctx, d, err)
			}
		}()
	}
	wg.Wait()
	spans := sr.Ended()
	if len(spans) != workers*each {
		t.Fatalf("%d spans, want %d", len(spans), workers*each)
	}
	for _, s := range spans {
		a := attrs(s.Attributes())
		tag := uint64(a["messaging.rabbitmq.message.delivery_tag"].AsInt64())
		if got, want := a["messaging.rabbitmq.destination.routing_key"].AsString(), "rk-"+strconv.FormatUint(tag, 10); got != want {
			t.Fatalf("tag %d: routing key %q, want %q", tag, got, want)
		}
		id, hasID := a["messaging.message.id"]
		if wantID := tag%3 == 0; hasID != wantID || (wantID && id.AsString() != "m-"+strconv.FormatUint(tag, 10)) {
			t.Fatalf("tag %d: message id %q (present %v)", tag, id.AsString(), hasID)
		}
		et, failed := a["error.type"]
		outcome := a[otelmq.OutcomeKey].AsString()
		if tag%2 == 0 {
			if !failed || et.AsString() == "" || outcome != "reject" {
				t.Fatalf("tag %d: outcome %q error.type %q (present %v), want reject and an error type", tag, outcome, et.AsString(), failed)
			}
		} else if failed || outcome != "ack" {
			t.Fatalf("tag %d: outcome %q error.type %q (present %v), want ack and none", tag, outcome, et.AsString(), failed)
		}
	}
}

// OnPublish builds a publish span's start attributes in a buffer shared
// through a pool: publishes started at once, on many goroutines, hops or
// not, must each start with their own routing key, message id and hop
// attributes, and with nothing left from another publish's buffer.
func TestConcurrentPublishesKeepTheirOwnAttributes(t *testing.T) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	defer tp.Shutdown(context.Background())
	ins := otelmq.New(otelmq.WithTracerProvider(tp), otelmq.WithMeterProvider(metricnoop.NewMeterProvider()))
	const workers, each = 8, 200
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				n := strconv.Itoa(w*each + i + 1)
				m := mq.Message{Headers: amqp.Table{}}
				if (w*each+i)%3 == 0 {
					m.MessageId = "m-" + n
				}
				p := &mq.PublishInfo{RoutingKey: "rk-" + n, Message: &m, Server: server}
				if (w*each+i)%2 == 0 {
					m.Headers[mq.HeaderAttempt] = int32(2)
					m.Headers[mq.HeaderReason] = "exhausted"
					p.Hop = mq.OutcomeDeadLetter
				}
				ins.OnPublishDone(ins.OnPublish(context.Background(), p), p, nil)
			}
		})
	}
	wg.Wait()
	spans := sr.Ended()
	if len(spans) != workers*each {
		t.Fatalf("%d spans, want %d", len(spans), workers*each)
	}
	for _, s := range spans {
		a := attrs(s.Attributes())
		key := a["messaging.rabbitmq.destination.routing_key"].AsString()
		k, err := strconv.Atoi(strings.TrimPrefix(key, "rk-"))
		if err != nil {
			t.Fatalf("routing key %q", key)
		}
		id, hasID := a["messaging.message.id"]
		if wantID := (k-1)%3 == 0; hasID != wantID || (wantID && id.AsString() != "m-"+strconv.Itoa(k)) {
			t.Fatalf("%s: message id %q (present %v)", key, id.AsString(), hasID)
		}
		reason, hasReason := a[otelmq.ReasonKey]
		if hop := (k-1)%2 == 0; hasReason != hop || (hop && reason.AsString() != "exhausted") {
			t.Fatalf("%s: reason %q (present %v), hop %v", key, reason.AsString(), hasReason, hop)
		}
	}
}
