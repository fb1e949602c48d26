//go:build integration

package integration

// Readiness that covers the outbox's and the inbox's database (issue 29):
// /readyz of an fx app with the outbox (or the inbox) in it answers for
// their database, and reports how far behind the relay is.

import (
	"context"
	"database/sql"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"

	"github.com/acemq/acemq-go/fxmodule"
	"github.com/acemq/acemq-go/internal/tcpproxy"
	"github.com/acemq/acemq-go/internal/testenv"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/outbox"
)

// readyProbe asks h for /readyz: the status and the body.
func readyProbe(h http.Handler) (int, string) {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	return rec.Code, rec.Body.String()
}

// readyDBProxy is a TCP proxy in front of the test's PostgreSQL, and a
// *sql.DB that goes through it: refusing and cutting its connections is a
// database that goes away, without touching the shared one.
func readyDBProxy(t *testing.T) (*tcpproxy.Proxy, *sql.DB) {
	t.Helper()
	p, err := tcpproxy.Start("127.0.0.1:5432")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	url := outboxURL()
	if !strings.Contains(url, "127.0.0.1:5432") {
		t.Fatalf("PG_URL %q: this test proxies 127.0.0.1:5432 only", url)
	}
	return p, outboxOpen(t, strings.Replace(url, "127.0.0.1:5432", p.Addr(), 1))
}

// readyApp starts an fx app with the broker, the outbox module over db
// and the given options, and returns its broker.
func readyApp(t *testing.T, db *sql.DB, opts ...fx.Option) *mq.Broker {
	t.Helper()
	var b *mq.Broker
	app := fxtest.New(t, append([]fx.Option{
		fx.NopLogger,
		fx.Supply(mq.Config{URLs: []string{testenv.URL()}, Logger: testenv.Discard()}),
		fx.Supply(db),
		fxmodule.Module,
		fx.Populate(&b),
	}, opts...)...)
	app.RequireStart()
	t.Cleanup(app.RequireStop)
	return b
}

// With the outbox in the app, /readyz answers for its database: ready,
// with the relay's table in the answer, while PostgreSQL answers; 503
// naming the outbox and the database's error when it goes away; ready
// again when it is back.
func TestReadyOutboxDatabase(t *testing.T) {
	direct := outboxOpen(t, outboxURL())
	s := outboxTables(t, direct)
	proxy, db := readyDBProxy(t)
	b := readyApp(t, db, outbox.Module(outbox.WithSchema(s)))
	ready := fxmodule.ReadyHandler(b)

	code, body := readyProbe(ready)
	if code != http.StatusOK || !strings.Contains(body, "outbox: "+s.Outbox) {
		t.Fatalf("readyz with the database up: %d %q, want 200 naming %s", code, body, s.Outbox)
	}
	proxy.Refuse(true)
	proxy.Cut()
	var last string
	testenv.Eventually(t, 30*time.Second, func() bool {
		code, body = readyProbe(ready)
		last = body
		return code == http.StatusServiceUnavailable
	}, "readyz to answer 503 with the database gone: last %q", last)
	if !strings.Contains(body, "mq: not ready: outbox: "+s.Outbox) {
		t.Fatalf("readyz with the database gone: %q, want the outbox's line and its reason", body)
	}
	t.Logf("database gone: %q", body)
	proxy.Refuse(false)
	testenv.Eventually(t, 30*time.Second, func() bool { code, _ := readyProbe(ready); return code == http.StatusOK },
		"readyz to answer 200 with the database back")
}

// A pending row that waits (the relay cannot send it: a broker that
// refuses, a relay that is behind) is reported by /readyz with its age,
// and by the relay's acemq.outbox.oldest.age gauge; it does not make the
// service not ready (docs/outbox.md, Readiness).
func TestReadyOutboxOldestRow(t *testing.T) {
	db := outboxOpen(t, outboxURL())
	s := outboxTables(t, db)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	b := readyApp(t, db, outbox.Module(outbox.WithSchema(s), outbox.PollInterval(100*time.Millisecond)),
		fx.Supply(fx.Annotate(mp, fx.As(new(metric.MeterProvider)))))
	// A row written 90 s ago whose retry is an hour away: the relay
	// cannot send it before then.
	ctx := testenv.Context(t, time.Minute)
	if _, err := db.ExecContext(ctx, `INSERT INTO `+s.Outbox+` (created_at, exchange, routing_key, body, properties, retry_at, attempts)
VALUES (now() - interval '90 seconds', 'ready-nowhere', 'k', '\x', '{}', now() + interval '1 hour', 1)`); err != nil {
		t.Fatal(err)
	}
	code, body := readyProbe(fxmodule.ReadyHandler(b))
	if code != http.StatusOK || !strings.Contains(body, "oldest pending row 1m3") {
		t.Fatalf("readyz with a 90 s old row: %d %q, want 200 and the row's age", code, body)
	}
	t.Logf("readyz: %q", body)
	var age float64
	testenv.Eventually(t, 30*time.Second, func() bool {
		age, _ = outboxGauge(t, reader, outbox.MetricOldestAge, "")
		return age >= 90
	}, "%s to reach 90 s: %v", outbox.MetricOldestAge, age)
}

// /readyz's oldest pending row and the relay's gauge are one definition:
// the first pending row in the order rows were written (id), the next the
// relays send. Here the row written first was created a minute ago and
// one written after it an hour ago (a transaction that ran long before
// it wrote its row): both must say a minute.
func TestReadyOutboxOldestAgreesWithGauge(t *testing.T) {
	db := outboxOpen(t, outboxURL())
	s := outboxTables(t, db)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	b := readyApp(t, db, outbox.Module(outbox.WithSchema(s), outbox.PollInterval(100*time.Millisecond)),
		fx.Supply(fx.Annotate(mp, fx.As(new(metric.MeterProvider)))))
	ctx := testenv.Context(t, time.Minute)
	for _, ago := range []string{"60 seconds", "1 hour"} { // in id order; neither can be sent for an hour
		if _, err := db.ExecContext(ctx, `INSERT INTO `+s.Outbox+` (created_at, exchange, routing_key, body, properties, retry_at, attempts)
VALUES (now() - $1::interval, 'ready-nowhere', 'k', '\x', '{}', now() + interval '1 hour', 1)`, ago); err != nil {
			t.Fatal(err)
		}
	}
	code, body := readyProbe(fxmodule.ReadyHandler(b))
	if code != http.StatusOK || !strings.Contains(body, "oldest pending row 1m0") {
		t.Fatalf("readyz: %d %q, want 200 and the first row's age, 1m0s", code, body)
	}
	var age float64
	testenv.Eventually(t, 30*time.Second, func() bool {
		age, _ = outboxGauge(t, reader, outbox.MetricOldestAge, "")
		return age > 0
	}, "%s to be refreshed", outbox.MetricOldestAge)
	if age < 60 || age > 90 {
		t.Fatalf("%s = %.0f s, readyz %q: want the same row's age, 60 s", outbox.MetricOldestAge, age, body)
	}
}

// The relay's gauge of its oldest pending row goes on while the broker is
// unreachable: rows pile up, the gauge says how long for.
func TestReadyOutboxAgeBrokerDown(t *testing.T) {
	db := outboxOpen(t, outboxURL())
	s := outboxTables(t, db)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	down := mq.New(mq.Config{URLs: []string{"amqp://guest:guest@" + testenv.ClosedAddr(t) + "/"}, Logger: testenv.Discard()})
	t.Cleanup(func() { _ = down.Close(context.Background()) })
	ctx := testenv.Context(t, time.Minute)
	ob := outbox.New(outbox.WithSchema(s))
	for range 3 {
		if err := outboxWrite(ctx, db, ob, "", "ready-q", mq.Message{}, true, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.ExecContext(ctx, `UPDATE `+s.Outbox+` SET created_at = now() - interval '1 minute'`); err != nil {
		t.Fatal(err)
	}
	outboxRelay(t, outbox.NewRelay(db, down, outbox.WithSchema(s), outbox.WithMeterProvider(mp), outbox.PollInterval(100*time.Millisecond)))
	var age, depth float64
	testenv.Eventually(t, 30*time.Second, func() bool {
		age, _ = outboxGauge(t, reader, outbox.MetricOldestAge, "")
		depth, _ = outboxGauge(t, reader, outbox.MetricDepth, "pending")
		return age >= 60 && depth == 3
	}, "the gauges with the broker down: age %v, pending %v", age, depth)
}

// With the inbox's check in the app, /readyz answers for the inbox's
// table: 503 naming it while it is missing (the inbox would hold every
// delivery waiting for it), ready once it is there.
func TestReadyInboxTable(t *testing.T) {
	db := outboxOpen(t, outboxURL())
	s := outboxTables(t, db)
	missing := outbox.Schema{Outbox: s.Outbox, Inbox: s.Inbox + "_missing"}
	b := readyApp(t, db, fxmodule.AsCheck(func(db *sql.DB) fxmodule.Check { return outbox.InboxCheck(db, missing) }))
	code, body := readyProbe(fxmodule.ReadyHandler(b, outbox.InboxCheck(db, s)))
	want := "mq: not ready: inbox: " + missing.Inbox + ": "
	if code != http.StatusServiceUnavailable || !strings.Contains(body, want) || !strings.Contains(body, "does not exist") ||
		!strings.Contains(body, "inbox: "+s.Inbox+"\n") {
		t.Fatalf("readyz with one inbox table missing: %d %q, want 503 with %q and the other table's line", code, body, want)
	}
	t.Logf("readyz: %q", body)
	if _, err := db.ExecContext(testenv.Context(t, time.Minute), "CREATE TABLE "+missing.Inbox+" (LIKE "+s.Inbox+")"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = db.Exec("DROP TABLE IF EXISTS " + missing.Inbox) })
	if code, body := readyProbe(fxmodule.ReadyHandler(b)); code != http.StatusOK || body != "ready\ninbox: "+missing.Inbox+"\n" {
		t.Fatalf("readyz with the table there: %d %q", code, body)
	}
}

// Without fx: a database on a port that refuses makes ReadyHandler's
// answer 503 with the refusal, even with the broker connected.
func TestReadyOutboxRefusedPort(t *testing.T) {
	b := testenv.Broker(t, mq.Config{Logger: testenv.Discard()})
	url := strings.Replace(outboxURL(), "127.0.0.1:5432", testenv.ClosedAddr(t), 1)
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	code, body := readyProbe(fxmodule.ReadyHandler(b, outbox.RelayCheck(db, outbox.Schema{})))
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "mq: not ready: outbox: acemq_outbox: ") ||
		!strings.Contains(body, "connection refused") {
		t.Fatalf("readyz with the database's port refusing: %d %q", code, body)
	}
	t.Logf("readyz: %q", body)
}
