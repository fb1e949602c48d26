//go:build integration

package integration

// The outbox and inbox suite (issue 23) against PostgreSQL and the broker.
// Its helpers start with outbox (outbox_helpers_test.go).

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.uber.org/fx"

	"github.com/acemq/acemq-go/fxmodule"
	"github.com/acemq/acemq-go/internal/testenv"
	"github.com/acemq/acemq-go/middleware"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/outbox"
	"github.com/acemq/acemq-go/retry"
	"github.com/acemq/acemq-go/topology"
)

// outboxDefaultURL is the machine's PostgreSQL.
const outboxDefaultURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// outboxURL is the PostgreSQL the outbox suites use: PG_URL, or the
// machine's.
func outboxURL() string {
	if u := os.Getenv("PG_URL"); u != "" {
		return u
	}
	return outboxDefaultURL
}

// outboxServiceTables is a goit_* prefix for the tables of a service the
// test runs (examples/service's SERVICE_TABLES), whose tables — its
// orders and shipments, its outbox and inbox — are dropped from db when
// the test ends.
func outboxServiceTables(t testing.TB, db *sql.DB) string {
	t.Helper()
	var b [4]byte
	_, _ = rand.Read(b[:])
	prefix := "goit_svc_" + hex.EncodeToString(b[:]) + "_"
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if _, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS "+prefix+"orders, "+prefix+"shipments, "+prefix+"outbox, "+prefix+"inbox"); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	return prefix
}

// outboxRig is what most outbox tests start from: the machine's
// PostgreSQL with tables of the test's own, a broker logging to log, a
// classic goit.* queue on it, and a context of a minute.
func outboxRig(t *testing.T, log *slog.Logger) (*sql.DB, outbox.Schema, *mq.Broker, string, context.Context) {
	t.Helper()
	db := outboxOpen(t, outboxURL())
	s := outboxTables(t, db)
	b := testenv.Broker(t, mq.Config{Logger: log})
	q := testenv.Queue(t, b, retry.Policy{}, topology.Classic())
	return db, s, b, q, testenv.Context(t, time.Minute)
}

// outboxRelay runs r until the test ends (or the returned stop is called)
// and fails the test if Run returns an error.
func outboxRelay(t *testing.T, r *outbox.Relay) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("relay: %v", err)
				}
			case <-time.After(40 * time.Second):
				t.Errorf("the relay did not stop within 40 s")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// A committed write reaches the queue with its body, every property and
// every header exactly as a direct publish of the same message arrives; a
// rolled-back one never does; the relay's publish span is a child of the
// writer's span; the row is gone once the broker confirmed it.
func TestOutboxRoundTrip(t *testing.T) {
	rig := newOtelRig(t)
	db := outboxOpen(t, outboxURL())
	s := outboxTables(t, db)
	viaOutbox, direct := rig.queue("outbox"), rig.queue("direct")
	ctx := testenv.Context(t, time.Minute)

	ts := time.Unix(1764630000, 0)
	m := func() mq.Message {
		return mq.Message{Body: []byte(`{"order":42}`), ContentType: "application/json", ContentEncoding: "identity",
			DeliveryMode: amqp.Transient, Priority: 3, CorrelationId: "corr-42", ReplyTo: "goit.replies", Expiration: "600000",
			MessageId: "order-42", Timestamp: ts, Type: "order.placed", UserId: "guest", AppId: "shop",
			Headers: amqp.Table{"s": "x", "b": []byte("raw"), "t": true, "i8": int8(-1), "i16": int16(-300), "i32": int32(70000),
				"i64": int64(1) << 40, "u8": uint8(200), "u16": uint16(60000), "f32": float32(0.5), "f64": 2.25,
				"dec": amqp.Decimal{Scale: 1, Value: 15}, "time": ts, "nested": amqp.Table{"k": "v", "n": int32(1)},
				"list": []any{"a", int32(2)}}}
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rig.spans))
	wctx, req := tp.Tracer("goit.http").Start(ctx, "POST /orders")
	ob := outbox.New(outbox.WithSchema(s), outbox.WithPropagators(propagation.TraceContext{}))
	if err := outboxWrite(wctx, db, ob, "", viaOutbox, m(), true, nil); err != nil {
		t.Fatal(err)
	}
	rolled := m()
	rolled.MessageId = "rolled-back"
	if err := outboxWrite(wctx, db, ob, "", viaOutbox, rolled, false, nil); err != nil {
		t.Fatal(err)
	}
	req.End()
	rig.publish(direct, m())

	outboxRelay(t, outbox.NewRelay(db, rig.b, outbox.WithSchema(s), outbox.WithPropagators(propagation.TraceContext{})))
	got, want := rig.get(viaOutbox), rig.get(direct)
	if got.MessageId != "order-42" {
		t.Fatalf("got message %q", got.MessageId)
	}
	props := func(d amqp.Delivery) []any {
		return []any{d.ContentType, d.ContentEncoding, d.DeliveryMode, d.Priority, d.CorrelationId, d.ReplyTo,
			d.Expiration, d.MessageId, d.Timestamp.Unix(), d.Type, d.UserId, d.AppId, string(d.Body)}
	}
	if !reflect.DeepEqual(props(got), props(want)) {
		t.Errorf("properties differ from a direct publish:\noutbox %v\ndirect %v", props(got), props(want))
	}
	gh, wh := maps.Clone(got.Headers), maps.Clone(want.Headers)
	delete(gh, "traceparent")
	delete(wh, "traceparent")
	if !reflect.DeepEqual(gh, wh) {
		t.Errorf("headers differ from a direct publish:\noutbox %#v\ndirect %#v", gh, wh)
	}

	rig.waitSpans("publish "+viaOutbox, 1)
	pub := otelNamed(rig.spans.Ended(), "publish "+viaOutbox)[0]
	if pub.SpanContext().TraceID() != req.SpanContext().TraceID() || pub.Parent().SpanID() != req.SpanContext().SpanID() {
		t.Errorf("the relay's publish span is in trace %s under %s, want trace %s under the request's span %s",
			pub.SpanContext().TraceID(), pub.Parent().SpanID(), req.SpanContext().TraceID(), req.SpanContext().SpanID())
	}
	if tpHdr, _ := got.Headers["traceparent"].(string); !strings.Contains(tpHdr, req.SpanContext().TraceID().String()) {
		t.Errorf("the delivered traceparent %q is not in the request's trace %s", tpHdr, req.SpanContext().TraceID())
	}
	testenv.Eventually(t, 10*time.Second, func() bool { return outboxCount(t, db, s.Outbox, "") == 0 }, "the outbox row deleted")
	time.Sleep(300 * time.Millisecond)
	if n := testenv.Count(t, rig.b, viaOutbox); n != 0 {
		t.Errorf("%d more messages in %s: the rolled-back write was published", n, viaOutbox)
	}
}

// Three relays share one table while four writers write 400 rows, each
// writer its own ordering key: every row is published, and each key's rows
// reach the queue in the order they were written.
func TestOutboxRelaysShareInOrder(t *testing.T) {
	const writers, each, relays = 4, 100, 3
	db := outboxOpen(t, outboxURL())
	s := outboxTables(t, db)
	b := testenv.Broker(t, mq.Config{Logger: testenv.Discard()})
	q := testenv.Queue(t, b, retry.Policy{}, topology.Classic())
	ctx := testenv.Context(t, 2*time.Minute)

	var published [relays]func() int64
	for i := range relays {
		reader := sdkmetric.NewManualReader()
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		outboxRelay(t, outbox.NewRelay(db, b, outbox.WithSchema(s), outbox.WithMeterProvider(mp), outbox.BatchSize(16)))
		published[i] = func() int64 { return outboxSum(t, reader, outbox.MetricPublishes, "published") }
	}
	ob := outbox.New(outbox.WithSchema(s), outbox.OrderBy(func(_, _ string, m *mq.Message) string { return m.Type }))
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				m := mq.Message{MessageId: fmt.Sprintf("w%d-%03d", w, i), Type: fmt.Sprintf("w%d", w)}
				if err := outboxWrite(ctx, db, ob, "", q, m, true, nil); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()

	var mu sync.Mutex
	seen := map[string]int{}
	last := map[string]int{}
	var disorder []string
	c, err := b.Consume(ctx, q, mq.HandlerFunc(func(_ context.Context, d *mq.Delivery) error {
		var w, i int
		fmt.Sscanf(d.MessageId, "w%d-%d", &w, &i)
		mu.Lock()
		defer mu.Unlock()
		if seen[d.MessageId] == 0 {
			if prev, ok := last[d.Type]; ok && i < prev {
				disorder = append(disorder, fmt.Sprintf("%s after %s-%03d", d.MessageId, d.Type, prev))
			}
			last[d.Type] = i
		}
		seen[d.MessageId]++
		return nil
	}), mq.WithConcurrency(1), mq.WithPrefetch(1))
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(seen) == writers*each },
		"all %d rows delivered", writers*each)
	testenv.Stop(t, c)
	var dups int
	for _, n := range seen {
		dups += n - 1
	}
	if len(disorder) > 0 {
		t.Errorf("%d rows out of their key's order, e.g. %v", len(disorder), disorder[:min(5, len(disorder))])
	}
	// A relay deletes a row once its publish is confirmed, so the last
	// deletions may follow the last deliveries by a moment.
	testenv.Eventually(t, 20*time.Second, func() bool { return outboxCount(t, db, s.Outbox, "") == 0 }, "the outbox drained")
	var per []int64
	for _, p := range published {
		per = append(per, p())
	}
	t.Logf("published per relay %v, duplicates %d", per, dups)
	if dups != 0 {
		t.Errorf("%d duplicates without any fault", dups)
	}
}

// outboxMetric is the metric name as r reads it now.
func outboxMetric(t testing.TB, r *sdkmetric.ManualReader, name string) (metricdata.Metrics, bool) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == name {
				return m, true
			}
		}
	}
	return metricdata.Metrics{}, false
}

// outboxSum is the sum of the counter name's points whose
// acemq.outbox.outcome is outcome (or all, for "").
func outboxSum(t testing.TB, r *sdkmetric.ManualReader, name, outcome string) int64 {
	t.Helper()
	m, _ := outboxMetric(t, r, name)
	sum, _ := m.Data.(metricdata.Sum[int64])
	var n int64
	for _, p := range sum.DataPoints {
		if v, _ := p.Attributes.Value(outbox.OutcomeKey); outcome == "" || v.AsString() == outcome {
			n += p.Value
		}
	}
	return n
}

// outboxGauge is the value of gauge name at the point with attribute
// acemq.outbox.state state (or the first point, for "").
func outboxGauge(t testing.TB, r *sdkmetric.ManualReader, name, state string) (float64, bool) {
	t.Helper()
	m, _ := outboxMetric(t, r, name)
	switch g := m.Data.(type) {
	case metricdata.Gauge[int64]:
		for _, p := range g.DataPoints {
			if v, _ := p.Attributes.Value(outbox.StateKey); state == "" || v.AsString() == state {
				return float64(p.Value), true
			}
		}
	case metricdata.Gauge[float64]:
		for _, p := range g.DataPoints {
			return p.Value, true
		}
	}
	return 0, false
}

// A row the broker cannot route is tried again with growing waits (not in
// a hot loop), then set aside with its attempts and last error, in the
// table, logged and counted; a healthy row written after it goes out at
// once; the depth gauge counts the set-aside row.
func TestOutboxPoisonSetAside(t *testing.T) {
	lg := testenv.NewLogRecorder(t)
	db, s, b, q, ctx := outboxRig(t, lg.Logger()) // the relay logs to its Broker's logger
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))

	ob := outbox.New(outbox.WithSchema(s))
	nowhere := testenv.Name(t, "nowhere")
	if err := outboxWrite(ctx, db, ob, "", nowhere, mq.Message{MessageId: "poison"}, true, nil); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	outboxRelay(t, outbox.NewRelay(db, b, outbox.WithSchema(s), outbox.MaxAttempts(3), outbox.PollInterval(50*time.Millisecond),
		outbox.WithMeterProvider(mp)))
	if err := outboxWrite(ctx, db, ob, "", q, mq.Message{MessageId: "healthy"}, true, nil); err != nil {
		t.Fatal(err)
	}
	testenv.WaitCount(t, b, q, 1, 10*time.Second)
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("the healthy row took %v behind the poison one", took)
	}
	time.Sleep(500 * time.Millisecond)
	if n := outboxCount(t, db, s.Outbox, "message_id = 'poison' AND attempts = 1"); n != 1 {
		t.Errorf("after ~0.5 s the poison row has not exactly 1 attempt (hot loop?): %d rows match", n)
	}
	testenv.Eventually(t, 15*time.Second, func() bool {
		return outboxCount(t, db, s.Outbox, "set_aside_at IS NOT NULL") == 1
	}, "the poison row set aside")
	took := time.Since(start)
	var attempts int
	var lastErr string
	if err := db.QueryRowContext(ctx, "SELECT attempts, last_error FROM "+s.Outbox+" WHERE message_id = 'poison'").Scan(&attempts, &lastErr); err != nil {
		t.Fatal(err)
	}
	if attempts != 3 || !strings.Contains(lastErr, "unroutable") {
		t.Errorf("set aside with attempts=%d last_error=%q, want 3 and unroutable", attempts, lastErr)
	}
	if took < 3*time.Second { // waits of 1 s and 2 s between the three attempts
		t.Errorf("three attempts within %v: the backoff was not waited", took)
	}
	if n, m := lg.Count(outbox.EventPublishFailed), lg.Count(outbox.EventSetAside); n != 2 || m != 1 {
		t.Errorf("events: %d %s, %d %s; want 2 and 1", n, outbox.EventPublishFailed, m, outbox.EventSetAside)
	}
	time.Sleep(1500 * time.Millisecond) // the relay refreshes its gauges about once a second
	if v, ok := outboxGauge(t, reader, outbox.MetricDepth, "set-aside"); !ok || v != 1 {
		t.Errorf("depth{set-aside} = %v (%v), want 1", v, ok)
	}
	if v, ok := outboxGauge(t, reader, outbox.MetricDepth, "pending"); !ok || v != 0 {
		t.Errorf("depth{pending} = %v (%v), want 0", v, ok)
	}
	if _, ok := outboxGauge(t, reader, outbox.MetricOldestAge, ""); !ok {
		t.Errorf("no %s gauge", outbox.MetricOldestAge)
	}
	if p, r, a := outboxSum(t, reader, outbox.MetricPublishes, "published"), outboxSum(t, reader, outbox.MetricPublishes, "retry"),
		outboxSum(t, reader, outbox.MetricPublishes, "set-aside"); p != 1 || r != 2 || a != 1 {
		t.Errorf("publishes: published=%d retry=%d set-aside=%d, want 1 2 1", p, r, a)
	}
}

// With polling at once a minute, a commit still reaches the queue within
// milliseconds: the relay wakes on the commit's NOTIFY (WithNotify), or
// finds the row by its probe.
func TestOutboxNotifyWakesRelay(t *testing.T) {
	db, s, b, q, ctx := outboxRig(t, testenv.Discard())
	outboxRelay(t, outbox.NewRelay(db, b, outbox.WithSchema(s), outbox.PollInterval(time.Minute)))
	time.Sleep(500 * time.Millisecond) // the relay's first look, and its LISTEN
	got := make(chan time.Time, 10)
	c, err := b.Consume(ctx, q, mq.HandlerFunc(func(context.Context, *mq.Delivery) error { got <- time.Now(); return nil }))
	if err != nil {
		t.Fatal(err)
	}
	defer testenv.Stop(t, c)
	ob := outbox.New(outbox.WithSchema(s), outbox.WithNotify())
	for i := range 5 {
		start := time.Now()
		if err := outboxWrite(ctx, db, ob, "", q, mq.Message{MessageId: fmt.Sprint("n", i)}, true, nil); err != nil {
			t.Fatal(err)
		}
		select {
		case at := <-got:
			t.Logf("commit to delivery: %v", at.Sub(start))
		case <-time.After(5 * time.Second):
			t.Fatalf("write %d not delivered within 5 s: the relay was not woken", i)
		}
	}
}

// outboxEffects creates a goit_* effects table with the one column
// order_id of type column (e.g. "text NOT NULL": a second effect is a
// second row; "text PRIMARY KEY": a second effect is refused) and drops it
// when the test ends.
func outboxEffects(t *testing.T, db *sql.DB, s outbox.Schema, column string) string {
	t.Helper()
	table := strings.Replace(s.Inbox, "goit_inbox_", "goit_effects_", 1)
	if _, err := db.Exec("CREATE TABLE " + table + " (order_id " + column + ")"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = db.Exec("DROP TABLE IF EXISTS " + table) })
	return table
}

// The inbox: a message delivered three times has its effect once and is
// acknowledged twice without a call (logged, counted); a handler that
// fails after writing its effect leaves nothing, and its retry writes it
// once; a message without an id goes to the dead-letter queue unhandled
// with ErrNoKey; KeyBy keys by what the service says; old records are
// cleaned.
func TestInboxEffectsOnce(t *testing.T) {
	db := outboxOpen(t, outboxURL())
	s := outboxTables(t, db)
	effects := outboxEffects(t, db, s, "text NOT NULL")
	lg := testenv.NewLogRecorder(t, "acemq.message.settled")
	b := testenv.Broker(t, mq.Config{Logger: lg.Logger()})
	p := retry.Waits(50 * time.Millisecond)
	q := testenv.Queue(t, b, p, topology.Classic())
	ctx := testenv.Context(t, time.Minute)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	if _, err := db.ExecContext(ctx, "INSERT INTO "+s.Inbox+" (queue, key, received_at) VALUES ($1, 'ancient', now() - interval '8 days')", q); err != nil {
		t.Fatal(err)
	}

	var calls atomic.Int32
	var failed atomic.Bool
	h := mq.HandlerFunc(func(ctx context.Context, d *mq.Delivery) error {
		calls.Add(1)
		tx := outbox.Tx(ctx)
		if tx == nil {
			return errors.New("no transaction in the handler's context")
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO "+effects+" (order_id) VALUES ($1)", d.MessageId); err != nil {
			return err
		}
		if d.MessageId == "flaky" && failed.CompareAndSwap(false, true) {
			return errors.New("the carrier timed out after the booking was written")
		}
		return nil
	})
	c, err := b.Consume(ctx, q, h, middleware.Standard(p), mq.WithMiddleware(outbox.Inbox(db, outbox.WithSchema(s), outbox.WithMeterProvider(mp))))
	if err != nil {
		t.Fatal(err)
	}
	testenv.Publish(t, b, q, mq.Message{MessageId: "dup"}, mq.Message{MessageId: "dup"}, mq.Message{MessageId: "flaky"},
		mq.Message{MessageId: "dup"}, mq.MessageOf(amqp.Delivery{Body: []byte("no id")}))
	dlq := topology.DeadLetterQueue(q)
	testenv.WaitCount(t, b, dlq, 1, 15*time.Second)
	testenv.Eventually(t, 15*time.Second, func() bool { return outboxCount(t, db, effects, "") == 2 && lg.Count(outbox.EventDuplicate) == 2 },
		"two effects and two duplicates")
	testenv.Stop(t, c)
	if n := outboxCount(t, db, effects, "order_id = 'dup'"); n != 1 {
		t.Errorf("dup: %d effects, want 1", n)
	}
	if n := outboxCount(t, db, effects, "order_id = 'flaky'"); n != 1 {
		t.Errorf("flaky: %d effects, want 1 (the failed attempt's rolled back)", n)
	}
	if n := calls.Load(); n != 3 { // dup once, flaky twice, the id-less message never
		t.Errorf("handler called %d times, want 3", n)
	}
	if d := testenv.GetAll(t, b, dlq); len(d) != 1 || !strings.Contains(fmt.Sprint(d[0].Headers[mq.HeaderError]), "no key") {
		t.Errorf("dead letters: %v", d)
	}
	if n := outboxSum(t, reader, outbox.MetricDuplicates, ""); n != 2 {
		t.Errorf("%s = %d, want 2", outbox.MetricDuplicates, n)
	}
	if n := outboxCount(t, db, s.Inbox, "key = 'ancient'"); n != 0 {
		t.Errorf("the 8-day-old record was not cleaned")
	}

	// KeyBy: two message ids, one order.
	q2 := testenv.Queue(t, b, retry.Policy{}, topology.Classic())
	var byOrder atomic.Int32
	c2, err := b.Consume(ctx, q2, mq.HandlerFunc(func(context.Context, *mq.Delivery) error { byOrder.Add(1); return nil }),
		mq.WithMiddleware(outbox.Inbox(db, outbox.WithSchema(s), outbox.KeyBy(func(d *mq.Delivery) string {
			o, _ := d.Headers["order"].(string)
			return "order:" + o
		}))))
	if err != nil {
		t.Fatal(err)
	}
	testenv.Publish(t, b, q2, mq.Message{Headers: amqp.Table{"order": "7"}}, mq.Message{Headers: amqp.Table{"order": "7"}}, mq.Message{Headers: amqp.Table{"order": "8"}})
	testenv.Eventually(t, 10*time.Second, func() bool { return testenv.Count(t, b, q2) == 0 && byOrder.Load() == 2 }, "two orders handled")
	testenv.Stop(t, c2)
	if n := byOrder.Load(); n != 2 {
		t.Errorf("KeyBy: %d calls for two orders", n)
	}
}

// outboxEvents is how the fx test's service names its event publisher.
type outboxEvents interface{ mq.Sender }

// An fx app with fxmodule.Module and outbox.Module: the topology is
// declared, a handler's write through the outbox
// sender (outbox.AsSender) inside the inbox's transaction reaches the
// second queue once although the message came twice, a publish without a
// transaction fails with ErrNoTx, and stop drains and leaves nothing
// running.
func TestOutboxFxModule(t *testing.T) {
	testenv.NoLeaks(t)
	db := outboxOpen(t, outboxURL())
	s := outboxTables(t, db)
	helper := testenv.Broker(t, mq.Config{Logger: testenv.Discard()})
	in, out := testenv.Name(t, "in"), testenv.Name(t, "out")
	testenv.Cleanup(t, in, out)
	var events outboxEvents
	app := fxApp(t,
		fxConfig(t),
		fx.Supply(db),
		fxmodule.AsTopology(topology.New().Queue(in, topology.Classic()).Queue(out, topology.Classic())),
		outbox.Module(outbox.WithSchema(s)),
		outbox.AsSender[outboxEvents](""),
		fx.Populate(&events),
		fxmodule.AsConsumer(func(ev outboxEvents) fxmodule.Consumer {
			return fxmodule.Consumer{Queue: in, Options: []mq.ConsumerOption{mq.WithMiddleware(outbox.Inbox(db, outbox.WithSchema(s)))},
				Handler: mq.HandlerFunc(func(ctx context.Context, d *mq.Delivery) error {
					return ev.Publish(ctx, out, mq.Message{MessageId: "shipped-" + d.MessageId})
				})}
		}),
	)
	app.RequireStart()
	if err := events.Publish(context.Background(), out, mq.Message{}); !errors.Is(err, outbox.ErrNoTx) {
		t.Errorf("a publish without a transaction: %v, want ErrNoTx", err)
	}
	testenv.Publish(t, helper, in, mq.Message{MessageId: "o-1"}, mq.Message{MessageId: "o-1"})
	testenv.WaitCount(t, helper, out, 1, 15*time.Second)
	time.Sleep(300 * time.Millisecond) // the duplicate, had it been published
	app.RequireStop()
	if got := testenv.GetAll(t, helper, out); len(got) != 1 || got[0].MessageId != "shipped-o-1" {
		var ids []string
		for _, d := range got {
			ids = append(ids, d.MessageId)
		}
		t.Errorf("out holds %v, want exactly shipped-o-1 (the second o-1 a duplicate)", ids)
	}
	if n := outboxCount(t, db, s.Outbox, ""); n != 0 {
		t.Errorf("%d rows left in the outbox", n)
	}
}

// Order holds through a refusal: the first row of an ordering key cannot
// be routed, so the key's second row waits (while a row of another key
// goes out at once) until the first is set aside.
func TestOutboxOrderWaitsForRefusedRow(t *testing.T) {
	db, s, b, q, ctx := outboxRig(t, testenv.Discard())
	ob := outbox.New(outbox.WithSchema(s), outbox.OrderBy(func(_, _ string, m *mq.Message) string { return m.Type }))
	nowhere := testenv.Name(t, "nowhere")
	for _, w := range []struct{ key, id, typ string }{{nowhere, "k-1", "k"}, {q, "k-2", "k"}, {q, "other-1", "other"}} {
		if err := outboxWrite(ctx, db, ob, "", w.key, mq.Message{MessageId: w.id, Type: w.typ}, true, nil); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	outboxRelay(t, outbox.NewRelay(db, b, outbox.WithSchema(s), outbox.MaxAttempts(2), outbox.PollInterval(50*time.Millisecond)))
	arrived := map[string]time.Duration{}
	var mu sync.Mutex
	c, err := b.Consume(ctx, q, mq.HandlerFunc(func(_ context.Context, d *mq.Delivery) error {
		mu.Lock()
		arrived[d.MessageId] = time.Since(start)
		mu.Unlock()
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 15*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(arrived) == 2 }, "k-2 and other-1 delivered")
	testenv.Stop(t, c)
	var asideAt time.Time
	if err := db.QueryRowContext(ctx, "SELECT set_aside_at FROM "+s.Outbox+" WHERE message_id = 'k-1'").Scan(&asideAt); err != nil {
		t.Fatal(err)
	}
	t.Logf("other-1 after %v, k-2 after %v; k-1 set aside after %v", arrived["other-1"], arrived["k-2"], asideAt.Sub(start))
	if arrived["other-1"] > 2*time.Second {
		t.Errorf("other-1, another key, waited %v for k's refused row", arrived["other-1"])
	}
	if arrived["k-2"] < time.Second { // k-1's second attempt comes 1 s after its first
		t.Errorf("k-2 went out after %v, before k-1 was retried and set aside", arrived["k-2"])
	}
}

// A broker that cannot be reached is not the rows' fault: while the
// relay's connection is cut and refused, its batches run out of time and
// leave every row as it was (no attempt counted, nothing set aside); once
// the broker is back, every row goes out.
func TestOutboxBrokerOutageLeavesRowsUntouched(t *testing.T) {
	db := outboxOpen(t, outboxURL())
	s := outboxTables(t, db)
	direct := testenv.Broker(t, mq.Config{Logger: testenv.Discard()})
	q := testenv.Queue(t, direct, retry.Policy{}, topology.Classic())
	proxy, u := testenv.Proxy(t)
	b := testenv.Broker(t, mq.Config{URLs: []string{u}, Logger: testenv.Discard()})
	ctx := testenv.Context(t, time.Minute)
	outboxRelay(t, outbox.NewRelay(db, b, outbox.WithSchema(s), outbox.PublishTimeout(time.Second), outbox.PollInterval(100*time.Millisecond)))

	proxy.Refuse(true)
	proxy.Cut()
	ob := outbox.New(outbox.WithSchema(s))
	for i := range 20 {
		if err := outboxWrite(ctx, db, ob, "", q, mq.Message{MessageId: fmt.Sprint("outage-", i)}, true, nil); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(2500 * time.Millisecond) // two batches run out of time at least
	if n := outboxCount(t, db, s.Outbox, "attempts = 0 AND set_aside_at IS NULL"); n != 20 {
		t.Errorf("during the outage %d of 20 rows are untouched", n)
	}
	proxy.Refuse(false)
	testenv.Eventually(t, 40*time.Second, func() bool { return outboxCount(t, db, s.Outbox, "") == 0 }, "the outbox drained")
	// Every row arrived. A publish whose confirm outlived PublishTimeout (1
	// s here; a loaded machine) is published again: a duplicate, which the
	// relay promises it may make, never a loss.
	seen := map[string]int{}
	got := testenv.GetAll(t, direct, q)
	for _, d := range got {
		seen[d.MessageId]++
	}
	for i := range 20 {
		if seen[fmt.Sprint("outage-", i)] == 0 {
			t.Errorf("outage-%d never arrived", i)
		}
	}
	if len(seen) != 20 {
		t.Errorf("%d distinct messages arrived, want the 20 rows: %v", len(seen), seen)
	}
	t.Logf("after the outage: %d messages, %d distinct, of 20 rows", len(got), len(seen))
}

// Two deliveries of one key at once (two workers): the second waits for
// the first's transaction and is then a duplicate; the handler runs once.
func TestInboxConcurrentDuplicates(t *testing.T) {
	lg := testenv.NewLogRecorder(t, "acemq.message.settled")
	db, s, b, q, ctx := outboxRig(t, lg.Logger())
	var calls atomic.Int32
	c, err := b.Consume(ctx, q, mq.HandlerFunc(func(context.Context, *mq.Delivery) error {
		calls.Add(1)
		time.Sleep(300 * time.Millisecond) // the second delivery arrives meanwhile
		return nil
	}), mq.WithConcurrency(2), mq.WithPrefetch(2), mq.WithMiddleware(outbox.Inbox(db, outbox.WithSchema(s))))
	if err != nil {
		t.Fatal(err)
	}
	testenv.Publish(t, b, q, mq.Message{MessageId: "same"}, mq.Message{MessageId: "same"})
	testenv.Eventually(t, 10*time.Second, func() bool { return lg.Count(outbox.EventDuplicate) == 1 }, "one duplicate")
	testenv.Stop(t, c)
	if n := calls.Load(); n != 1 {
		t.Errorf("handler called %d times for two deliveries of one key at once", n)
	}
	if n := outboxCount(t, db, s.Inbox, "key = 'same'"); n != 1 {
		t.Errorf("%d records", n)
	}
}

// WithoutNotify (the default) writes no NOTIFY, and a relay that claims
// only once a minute still publishes the row within a second: its probe
// of the table's newest row found it.
func TestOutboxWithoutNotifyPolls(t *testing.T) {
	db, s, b, q, ctx := outboxRig(t, testenv.Discard())
	outboxRelay(t, outbox.NewRelay(db, b, outbox.WithSchema(s), outbox.PollInterval(time.Minute)))
	time.Sleep(500 * time.Millisecond) // its first look
	ob := outbox.New(outbox.WithSchema(s), outbox.WithoutNotify())
	if err := outboxWrite(ctx, db, ob, "", q, mq.Message{MessageId: "quiet"}, true, nil); err != nil {
		t.Fatal(err)
	}
	testenv.WaitCount(t, b, q, 1, 10*time.Second)
}

// While the inbox's database fails (here: its table is gone), a delivery
// waits in the consumer, retrying with backoff, rather than going back to
// its queue again and again, which RabbitMQ 4.x counts towards a quorum
// queue's delivery limit; once the database answers, it is handled, once.
func TestInboxWaitsOutTheDatabase(t *testing.T) {
	lg := testenv.NewLogRecorder(t, "acemq.message.settled")
	db, s, b, q, ctx := outboxRig(t, lg.Logger())
	var calls atomic.Int32
	c, err := b.Consume(ctx, q, mq.HandlerFunc(func(context.Context, *mq.Delivery) error { calls.Add(1); return nil }),
		mq.WithRequeuePause(50*time.Millisecond), mq.WithMiddleware(outbox.Inbox(db, outbox.WithSchema(s))))
	if err != nil {
		t.Fatal(err)
	}
	// The table goes away once the consumer runs (missing at Consume, it
	// fails Consume: TestInboxConsumeChecksTable).
	if _, err := db.ExecContext(ctx, "ALTER TABLE "+s.Inbox+" RENAME TO "+s.Inbox+"_away"); err != nil {
		t.Fatal(err)
	}
	testenv.Publish(t, b, q, mq.Message{MessageId: "patient"})
	time.Sleep(1500 * time.Millisecond)
	requeued := lg.Count(mq.EventRequeued)
	if _, err := db.ExecContext(ctx, "ALTER TABLE "+s.Inbox+"_away RENAME TO "+s.Inbox); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 15*time.Second, func() bool { return calls.Load() == 1 }, "the message handled once the table is back")
	testenv.Stop(t, c)
	if requeued != 0 {
		t.Errorf("the delivery went back to its queue %d times in 1.5 s of database failure", requeued)
	}
	if n := lg.Count(outbox.EventInboxFailed); n == 0 {
		t.Errorf("no %s while the database failed", outbox.EventInboxFailed)
	}
}

// A row to an exchange that does not exist (the broker closes the channel
// with 404) is set aside with the broker's reason, and the rows of the
// same batch to a queue that exists all go out: the refusal is the row's
// alone.
func TestOutboxMissingExchangeSetAside(t *testing.T) {
	db, s, b, q, ctx := outboxRig(t, testenv.Discard())
	ob := outbox.New(outbox.WithSchema(s))
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if i == 10 {
			if err := ob.Publish(ctx, tx, testenv.Name(t, "missing"), "x", mq.Message{MessageId: "lost-exchange"}); err != nil {
				t.Fatal(err)
			}
		}
		if err := ob.Publish(ctx, tx, "", q, mq.Message{MessageId: fmt.Sprint("fine-", i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	outboxRelay(t, outbox.NewRelay(db, b, outbox.WithSchema(s), outbox.MaxAttempts(1)))
	testenv.WaitCount(t, b, q, 20, 15*time.Second)
	testenv.Eventually(t, 10*time.Second, func() bool { return outboxCount(t, db, s.Outbox, "") == 1 }, "only the refused row left")
	var lastErr string
	var aside bool
	if err := db.QueryRowContext(ctx, "SELECT last_error, set_aside_at IS NOT NULL FROM "+s.Outbox).Scan(&lastErr, &aside); err != nil {
		t.Fatal(err)
	}
	if !aside || (!strings.Contains(lastErr, "404") && !strings.Contains(strings.ToLower(lastErr), "not found")) {
		t.Errorf("the refused row: set aside %v, last_error %q", aside, lastErr)
	}
}
