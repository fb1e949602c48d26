//go:build integration

package integration

// The third audit's inbox and storage defects (issue 31: 1, 2, 4, 5, 9)
// and the inbox's doubled queue attribute (issue 29), against PostgreSQL
// and the broker. The rig is outbox_helpers_test.go's and outbox_test.go's.

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	amqp "github.com/rabbitmq/amqp091-go"
	"go.uber.org/fx"

	"github.com/acemq/acemq-go/fxmodule"
	"github.com/acemq/acemq-go/internal/testenv"
	"github.com/acemq/acemq-go/middleware"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/outbox"
	"github.com/acemq/acemq-go/retry"
	"github.com/acemq/acemq-go/topology"
)

// auditKeyOf keys a delivery by its "k" header when it has one, else by
// its message id: how the tests give a key longer than a message id can be.
func auditKeyOf(d *mq.Delivery) string {
	if k, ok := d.Headers["k"].(string); ok {
		return k
	}
	return d.MessageId
}

// auditHandled counts the handler's calls per key.
type auditHandled struct {
	mu    sync.Mutex
	calls map[string]int
}

func (a *auditHandled) add(k string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.calls == nil {
		a.calls = map[string]int{}
	}
	a.calls[k]++
}

func (a *auditHandled) get(k string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.calls[k]
}

func (a *auditHandled) total() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, c := range a.calls {
		n += c
	}
	return n
}

// auditBehind is five ordinary messages, queued behind a bad one.
func auditBehind(prefix string) []mq.Message {
	var ms []mq.Message
	for i := range 5 {
		ms = append(ms, mq.Message{MessageId: fmt.Sprintf("%s-behind-%d", prefix, i)})
	}
	return ms
}

// Keys PostgreSQL's text cannot hold as they are — a raw 16-byte UUID as
// the message id (not UTF-8: SQLSTATE 22021), an id with a NUL byte, a
// KeyBy key of 3000 bytes (over the primary key's btree limit) — are
// recorded like any other: each message is handled once, its second copy
// is a duplicate, and the five messages behind them are handled; nothing
// goes to the dead-letter queue and the inbox never takes them for a
// database outage.
func TestInboxAuditUnstorableKeys(t *testing.T) {
	lg := testenv.NewLogRecorder(t, "acemq.message.settled", outbox.EventDuplicate)
	db, s, b, _, ctx := outboxRig(t, lg.Logger())
	p := retry.Waits(50 * time.Millisecond)
	q := testenv.Queue(t, b, p, topology.Classic())
	var seen auditHandled
	c, err := b.Consume(ctx, q, mq.HandlerFunc(func(_ context.Context, d *mq.Delivery) error {
		seen.add(auditKeyOf(d))
		return nil
	}), middleware.Standard(p), mq.WithMiddleware(outbox.Inbox(db, outbox.WithSchema(s), outbox.KeyBy(auditKeyOf))))
	if err != nil {
		t.Fatal(err)
	}
	rawID := string([]byte{0x8a, 0xff, 0x10, 0x42, 0xc3, 0x28, 0x00, 0x01, 0xfe, 0xfe, 0x7f, 0x80, 0x81, 0x9f, 0xa0, 0xff})
	nulID := "order\x00-7"
	long := strings.Repeat("k", 3000)
	keys := []string{rawID, nulID, long}
	msgs := []mq.Message{
		{MessageId: rawID}, {MessageId: rawID},
		{MessageId: nulID}, {MessageId: nulID},
		{MessageId: "long-1", Headers: amqp.Table{"k": long}}, {MessageId: "long-2", Headers: amqp.Table{"k": long}},
	}
	behind := auditBehind("keys")
	start := time.Now()
	testenv.Publish(t, b, q, append(msgs, behind...)...)
	if !testenv.Poll(20*time.Second, func() bool { return seen.total() == 8 && lg.Count(outbox.EventDuplicate) == 3 }) {
		t.Fatalf("after 20 s: %d of 8 messages handled (%d of the 5 behind), %d of 3 duplicates, %s logged %d times, %d in the dead-letter queue",
			seen.total(), seen.total()-seen.get(rawID)-seen.get(nulID)-seen.get(long), lg.Count(outbox.EventDuplicate),
			outbox.EventInboxFailed, lg.Count(outbox.EventInboxFailed), testenv.Count(t, b, topology.DeadLetterQueue(q)))
	}
	t.Logf("3 unstorable keys (each twice) and 5 behind them handled in %v", time.Since(start).Round(time.Millisecond))
	testenv.Stop(t, c)
	for i, k := range keys {
		if n := seen.get(k); n != 1 {
			t.Errorf("key %d (%d bytes): handled %d times, want 1", i, len(k), n)
		}
	}
	if n := lg.Count(outbox.EventInboxFailed); n != 0 {
		t.Errorf("%s logged %d times: a key was taken for a database outage", outbox.EventInboxFailed, n)
	}
	if n := testenv.Count(t, b, topology.DeadLetterQueue(q)); n != 0 {
		t.Errorf("%d messages in the dead-letter queue", n)
	}
	if n := outboxCount(t, db, s.Inbox, ""); n != 8 {
		t.Errorf("%d inbox records, want 8", n)
	}
}

// A handler that tolerates a unique violation of its own INSERT (a second
// message for an order already booked) and returns nil: the failed
// statement aborted the inbox's transaction, so nothing can commit. The
// inbox says so (outbox.ErrTxAborted) and the message goes down the retry
// ladder to the dead-letter queue with that error, instead of being run
// again for ever; the five messages behind it are handled.
func TestInboxAuditAbortedTransaction(t *testing.T) {
	lg := testenv.NewLogRecorder(t, "acemq.message.settled")
	db, s, b, _, ctx := outboxRig(t, lg.Logger())
	effects := outboxEffects(t, db, s, "text PRIMARY KEY") // a second booking is refused
	p := retry.Waits(50*time.Millisecond, 50*time.Millisecond)
	q := testenv.Queue(t, b, p, topology.Classic())
	var runs atomic.Int32
	var seen auditHandled
	c, err := b.Consume(ctx, q, mq.HandlerFunc(func(ctx context.Context, d *mq.Delivery) error {
		seen.add(d.MessageId)
		order, _ := d.Headers["order"].(string)
		if order == "" {
			order = d.MessageId
		}
		if d.MessageId == "second-booking" {
			runs.Add(1)
		}
		_, err := outbox.Tx(ctx).ExecContext(ctx, "INSERT INTO "+effects+" (order_id) VALUES ($1)", order)
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "23505" {
			return nil // booked already: idempotent, or so the handler thinks
		}
		return err
	}), middleware.Standard(p), mq.WithMiddleware(outbox.Inbox(db, outbox.WithSchema(s))))
	if err != nil {
		t.Fatal(err)
	}
	testenv.Publish(t, b, q, mq.Message{MessageId: "first-booking", Headers: amqp.Table{"order": "o-1"}})
	testenv.Eventually(t, 10*time.Second, func() bool { return seen.get("first-booking") == 1 }, "the first booking handled")
	start := time.Now()
	testenv.Publish(t, b, q, append([]mq.Message{{MessageId: "second-booking", Headers: amqp.Table{"order": "o-1"}}}, auditBehind("aborted")...)...)
	dlq := topology.DeadLetterQueue(q)
	if !testenv.Poll(20*time.Second, func() bool { return testenv.Count(t, b, dlq) == 1 }) {
		t.Fatalf("after 20 s the second booking is not in %s: it ran %d times, %s logged %d times, %d of the 5 behind handled",
			dlq, runs.Load(), outbox.EventInboxFailed, lg.Count(outbox.EventInboxFailed), seen.total()-seen.get("first-booking")-seen.get("second-booking"))
	}
	t.Logf("the aborted transaction's message reached %s in %v after %d runs", dlq, time.Since(start).Round(time.Millisecond), runs.Load())
	testenv.Eventually(t, 10*time.Second, func() bool { return outboxCount(t, db, effects, "") == 6 }, "the five behind handled")
	testenv.Stop(t, c)
	if n := runs.Load(); n != int32(p.Attempts()) {
		t.Errorf("the second booking ran %d times, want %d (the ladder's attempts)", n, p.Attempts())
	}
	d := testenv.GetAll(t, b, dlq)
	if len(d) != 1 || d[0].MessageId != "second-booking" || !strings.Contains(fmt.Sprint(d[0].Headers[mq.HeaderError]), "aborted") {
		t.Errorf("dead letters: %v", d)
	} else {
		t.Logf("its error: %s", d[0].Headers[mq.HeaderError])
	}
	if n := lg.Count(outbox.EventInboxFailed); n != 0 {
		t.Errorf("%s logged %d times: the handler's aborted transaction was taken for a database outage", outbox.EventInboxFailed, n)
	}
}

// A handler inside the inbox that overruns Timeout(d) and then returns
// nil: its transaction ended with its context, nothing committed. The
// attempt fails with the timeout and the message goes down the ladder to
// the dead-letter queue (as it does without the inbox), rather than back
// to its queue for ever; the five behind it are handled.
func TestInboxAuditHandlerOverrunsTimeout(t *testing.T) {
	lg := testenv.NewLogRecorder(t, "acemq.message.settled")
	db, s, b, _, ctx := outboxRig(t, lg.Logger())
	p := retry.Waits(50*time.Millisecond, 50*time.Millisecond)
	q := testenv.Queue(t, b, p, topology.Classic())
	var runs atomic.Int32
	var seen auditHandled
	c, err := b.Consume(ctx, q, mq.HandlerFunc(func(ctx context.Context, d *mq.Delivery) error {
		seen.add(d.MessageId)
		if d.MessageId == "slow" {
			runs.Add(1)
			time.Sleep(600 * time.Millisecond) // ignores its context
		}
		return nil
	}), middleware.Standard(p, middleware.WithTimeout(200*time.Millisecond)), mq.WithRequeuePause(50*time.Millisecond),
		mq.WithMiddleware(outbox.Inbox(db, outbox.WithSchema(s))))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	testenv.Publish(t, b, q, append([]mq.Message{{MessageId: "slow"}}, auditBehind("slow")...)...)
	dlq := topology.DeadLetterQueue(q)
	if !testenv.Poll(20*time.Second, func() bool { return testenv.Count(t, b, dlq) == 1 }) {
		t.Fatalf("after 20 s the slow message is not in %s: it ran %d times, was requeued %d times, %d of the 5 behind handled",
			dlq, runs.Load(), lg.Count(mq.EventRequeued), seen.total()-seen.get("slow"))
	}
	t.Logf("the overrunning message reached %s in %v after %d runs", dlq, time.Since(start).Round(time.Millisecond), runs.Load())
	testenv.Eventually(t, 10*time.Second, func() bool { return seen.total()-seen.get("slow") == 5 }, "the five behind handled")
	testenv.Stop(t, c)
	if n := runs.Load(); n != int32(p.Attempts()) {
		t.Errorf("the slow message ran %d times, want %d (the ladder's attempts)", n, p.Attempts())
	}
	if n := lg.Count(mq.EventRequeued); n != 0 {
		t.Errorf("requeued %d times", n)
	}
	d := testenv.GetAll(t, b, dlq)
	if len(d) != 1 || !strings.Contains(fmt.Sprint(d[0].Headers[mq.HeaderError]), "timed out") {
		t.Errorf("dead letters: %v", d)
	} else {
		t.Logf("its error: %s", d[0].Headers[mq.HeaderError])
	}
	if n := outboxCount(t, db, s.Inbox, "key = 'slow'"); n != 0 {
		t.Errorf("the overrunning message's record committed")
	}
}

// auditBytes is a message whose properties and headers are not all UTF-8
// text: invalid sequences, NUL bytes, in keys and values, nested.
func auditBytes() mq.Message {
	return mq.Message{
		Body:          []byte{0, 0xff, 1},
		MessageId:     string([]byte{0x8a, 0xff, 0x10, 0x42, 0xc3, 0x28, 0x00, 0x01, 0xfe, 0xfe, 0x7f, 0x80, 0x81, 0x9f, 0xa0, 0xff}),
		CorrelationId: "\x63\x2d\xc3\x28",
		ReplyTo:       "reply\x00to",
		Type:          "t\xff",
		AppId:         "app",
		Headers: amqp.Table{
			"\x8a\xff-sig": "\x8a\xff-sig",
			"nul":          "a\x00b",
			"k\x00ey":      []byte{0, 0xff},
			"plain":        "text",
			"\x01esc":      "a key that starts like an escaped one",
			"nested":       amqp.Table{"\xc3(": "\xfe\x00", "list": []any{"\xc3(", "ok", int32(3)}},
		},
	}
}

// The outbox keeps every byte: a message whose id, correlation id, reply-to,
// type and headers (keys and values, nested) hold bytes that are not UTF-8
// or are NUL is written (no SQLSTATE 22P05) and arrives exactly as a direct
// publish of it does, byte for byte.
func TestOutboxAuditKeepsEveryByte(t *testing.T) {
	db, s, b, q, ctx := outboxRig(t, testenv.Discard())
	direct := testenv.Queue(t, b, retry.Policy{}, topology.Classic())
	ob := outbox.New(outbox.WithSchema(s))
	if err := outboxWrite(ctx, db, ob, "", q, auditBytes(), true, nil); err != nil {
		t.Fatalf("outbox publish: %v", err)
	}
	testenv.Publish(t, b, direct, auditBytes())
	outboxRelay(t, outbox.NewRelay(db, b, outbox.WithSchema(s)))
	testenv.WaitCount(t, b, q, 1, 15*time.Second)
	got, want := testenv.GetAll(t, b, q), testenv.GetAll(t, b, direct)
	if len(got) != 1 || len(want) != 1 {
		t.Fatalf("got %d via the outbox, %d direct", len(got), len(want))
	}
	g, w := got[0], want[0]
	m := auditBytes()
	for _, f := range []struct {
		name           string
		got, want, msg string
	}{
		{"message id", g.MessageId, w.MessageId, m.MessageId},
		{"correlation id", g.CorrelationId, w.CorrelationId, m.CorrelationId},
		{"reply-to", g.ReplyTo, w.ReplyTo, m.ReplyTo},
		{"type", g.Type, w.Type, m.Type},
		{"body", string(g.Body), string(w.Body), string(m.Body)},
	} {
		if f.got != f.want || f.got != f.msg {
			t.Errorf("%s: outbox % x, direct % x, written % x", f.name, f.got, f.want, f.msg)
		}
	}
	delete(g.Headers, "traceparent")
	delete(w.Headers, "traceparent")
	if !reflect.DeepEqual(g.Headers, w.Headers) || !reflect.DeepEqual(g.Headers, m.Headers) {
		t.Errorf("headers:\noutbox  %#v\ndirect  %#v\nwritten %#v", g.Headers, w.Headers, m.Headers)
	}
}

// auditLongSchema creates a PostgreSQL schema whose name makes
// "<schema>.<table>" exactly n bytes with the table "outbox", dropped
// (with what it holds) when the test ends.
func auditLongSchema(t *testing.T, db *sql.DB, n int) outbox.Schema {
	t.Helper()
	var r [4]byte
	_, _ = rand.Read(r[:])
	name := "goit_" + hex.EncodeToString(r[:]) + "_"
	name += strings.Repeat("s", n-len(name)-len(".outbox"))
	if _, err := db.Exec("CREATE SCHEMA " + name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := db.Exec("DROP SCHEMA " + name + " CASCADE"); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	return outbox.Schema{Outbox: name + ".outbox", Inbox: name + ".inbox"}
}

// A schema-qualified outbox name of 64 and of 70 bytes (a schema name of
// 63), which the Schema
// accepts, can be published to: the NOTIFY channel is derived to fit
// PostgreSQL's 63 bytes, and a relay that polls once a minute is woken by
// it (so its LISTEN is on the same channel).
func TestOutboxAuditLongTableName(t *testing.T) {
	db, _, b, q, ctx := outboxRig(t, testenv.Discard())
	for i, n := range []int{64, 70} {
		s := auditLongSchema(t, db, n)
		if len(s.Outbox) != n {
			t.Fatalf("the test's name is %d bytes", len(s.Outbox))
		}
		if err := s.Create(ctx, db); err != nil {
			t.Fatalf("%d bytes: create: %v", n, err)
		}
		stop := outboxRelay(t, outbox.NewRelay(db, b, outbox.WithSchema(s), outbox.PollInterval(time.Minute)))
		time.Sleep(500 * time.Millisecond) // its first look, and its LISTEN
		id := fmt.Sprintf("long-name-%d", n)
		if err := outboxWrite(ctx, db, outbox.New(outbox.WithSchema(s)), "", q, mq.Message{MessageId: id}, true, nil); err != nil {
			t.Fatalf("%d-byte table %s: publish: %v", n, s.Outbox, err)
		}
		testenv.WaitCount(t, b, q, i+1, 10*time.Second)
		stop()
	}
}

// Schema.Create from many replicas at once: three rounds of 24 concurrent
// calls on one pool, then four "replicas" (a pool each) of 15 concurrent calls each,
// every one on tables that do not exist yet: every call succeeds.
func TestOutboxAuditConcurrentCreate(t *testing.T) {
	ctx := testenv.Context(t, 2*time.Minute)
	fresh := func(t *testing.T, db *sql.DB) outbox.Schema {
		var r [4]byte
		_, _ = rand.Read(r[:])
		id := hex.EncodeToString(r[:])
		s := outbox.Schema{Outbox: "goit_outbox_" + id, Inbox: "goit_inbox_" + id}
		t.Cleanup(func() { _, _ = db.Exec("DROP TABLE IF EXISTS " + s.Outbox + ", " + s.Inbox) })
		return s
	}
	run := func(dbs []*sql.DB, per int) (failed []error, calls int) {
		s := fresh(t, dbs[0])
		var mu sync.Mutex
		var wg sync.WaitGroup
		startGate := make(chan struct{})
		for _, db := range dbs {
			for range per {
				calls++
				wg.Go(func() {
					<-startGate
					if err := s.Create(ctx, db); err != nil {
						mu.Lock()
						failed = append(failed, err)
						mu.Unlock()
					}
				})
			}
		}
		close(startGate)
		wg.Wait()
		return failed, calls
	}
	one := outboxOpen(t, outboxURL())
	one.SetMaxOpenConns(30)
	for round := range 3 {
		if failed, n := run([]*sql.DB{one}, 24); len(failed) > 0 {
			t.Errorf("one pool, round %d: %d of %d concurrent Create calls failed; the first: %v", round+1, len(failed), n, failed[0])
		}
	}
	var replicas []*sql.DB
	for range 4 {
		db := outboxOpen(t, outboxURL())
		db.SetMaxOpenConns(15)
		replicas = append(replicas, db)
	}
	if failed, n := run(replicas, 15); len(failed) > 0 {
		t.Errorf("four replicas: %d of %d concurrent Create calls failed; the first: %v", len(failed), n, failed[0])
	}
}

// auditBuffer is a log sink safe for concurrent writes.
type auditBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (a *auditBuffer) Write(p []byte) (int, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.b.Write(p)
}

func (a *auditBuffer) lines(substr string) []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	for _, l := range strings.Split(a.b.String(), "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return out
}

// Under fx with the app's own slog logger, the inbox's duplicate record
// (and any inbox record) carries queue= once.
func TestInboxAuditQueueAttributeOnce(t *testing.T) {
	db := outboxOpen(t, outboxURL())
	s := outboxTables(t, db)
	helper := testenv.Broker(t, mq.Config{Logger: testenv.Discard()})
	in := testenv.Name(t, "in")
	testenv.Cleanup(t, in)
	var buf auditBuffer
	app := fxApp(t,
		fx.Supply(mq.Config{URLs: []string{testenv.URL()}, ReconnectMin: 20 * time.Millisecond, ReconnectMax: 200 * time.Millisecond,
			Logger: slog.New(slog.NewTextHandler(&buf, nil))}),
		fx.Supply(db),
		fxmodule.AsTopology(topology.New().Queue(in, topology.Classic())),
		fxmodule.AsConsumer(func() fxmodule.Consumer {
			return fxmodule.Consumer{Queue: in, Options: []mq.ConsumerOption{mq.WithMiddleware(outbox.Inbox(db, outbox.WithSchema(s)))},
				Handler: mq.HandlerFunc(func(context.Context, *mq.Delivery) error { return nil })}
		}),
	)
	app.RequireStart()
	testenv.Publish(t, helper, in, mq.Message{MessageId: "twice"}, mq.Message{MessageId: "twice"})
	testenv.Eventually(t, 15*time.Second, func() bool { return len(buf.lines(outbox.EventDuplicate)) == 1 }, "one duplicate record")
	app.RequireStop()
	line := buf.lines(outbox.EventDuplicate)[0]
	if n := strings.Count(line, " queue="); n != 1 {
		t.Errorf("the duplicate record carries queue= %d times: %s", n, line)
	}
}

// A database that refuses connections is an outage, not the message's
// failure: the delivery waits in the consumer (acemq.inbox.failed, not
// down the ladder, not back to its queue) for as long as it lasts, and a
// stop returns it to its queue.
func TestInboxAuditOutageStillWaits(t *testing.T) {
	lg := testenv.NewLogRecorder(t, "acemq.message.settled")
	_, s, b, _, ctx := outboxRig(t, lg.Logger())
	down, err := sql.Open("pgx", "postgres://postgres@127.0.0.1:1/test?sslmode=disable&connect_timeout=2")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = down.Close() })
	p := retry.Waits(50 * time.Millisecond)
	q := testenv.Queue(t, b, p, topology.Classic())
	var calls atomic.Int32
	c, err := b.Consume(ctx, q, mq.HandlerFunc(func(context.Context, *mq.Delivery) error { calls.Add(1); return nil }),
		middleware.Standard(p), mq.WithMiddleware(outbox.Inbox(down, outbox.WithSchema(s))))
	if err != nil {
		t.Fatal(err)
	}
	testenv.Publish(t, b, q, mq.Message{MessageId: "waits"})
	testenv.Eventually(t, 10*time.Second, func() bool { return lg.Count(outbox.EventInboxFailed) >= 3 }, "three waits for the database")
	if n := testenv.Count(t, b, topology.DeadLetterQueue(q)); n != 0 {
		t.Errorf("%d messages in the dead-letter queue during an outage", n)
	}
	if n := lg.Count(mq.EventRequeued); n != 0 {
		t.Errorf("requeued %d times during an outage", n)
	}
	if r := lg.All(outbox.EventInboxFailed)[0]; !strings.Contains(r.Attrs["error"], "connect") {
		t.Errorf("the wait's error: %s", r)
	}
	testenv.Stop(t, c)
	if n := calls.Load(); n != 0 {
		t.Errorf("handler called %d times without a database", n)
	}
	if n := testenv.Count(t, b, q); n != 1 {
		t.Errorf("%d messages in %s after the stop, want the waiting one back", n, q)
	}
}
