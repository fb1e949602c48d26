//go:build integration

package integration

// Issue 29: the inbox in fx in one line (fxmodule.Consumer.Inbox, the
// schema given once, to outbox.Module), and a start that checks the
// database: with the outbox or the inbox in the app, start fails at once,
// naming the table and its schema, when a table is missing or of another
// shape.

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/fx"

	"github.com/acemq/acemq-go/fxmodule"
	"github.com/acemq/acemq-go/internal/testenv"
	"github.com/acemq/acemq-go/middleware"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/outbox"
	"github.com/acemq/acemq-go/retry"
	"github.com/acemq/acemq-go/topology"
)

// inboxfxPolicy retries in process at once: a failed attempt's retry is
// the next attempt of the same delivery.
var inboxfxPolicy = retry.Waits(10 * time.Millisecond)

// A consumer with Inbox set runs in the inbox outbox.Module provides, with
// the one schema given to the module: its handler has the inbox's
// transaction, the record lands in the schema's inbox table, the inbox
// sits inside Standard's ladder (an attempt that failed after writing its
// effect left nothing, its retry wrote it once), and a redelivery is
// acknowledged unhandled.
func TestInboxFxOneLine(t *testing.T) {
	testenv.NoLeaks(t)
	db := outboxOpen(t, outboxURL())
	s := outboxTables(t, db)
	effects := outboxEffects(t, db, s, "text NOT NULL")
	helper := testenv.Broker(t, mq.Config{Logger: testenv.Discard()})
	q := testenv.Name(t)
	testenv.CleanupDerived(t, q, inboxfxPolicy)
	var calls, noTx atomic.Int32
	lg := testenv.NewLogRecorder(t)
	app := fxApp(t, fx.Supply(mq.Config{URLs: []string{testenv.URL()}, Logger: lg.Logger(), ReconnectMin: 20 * time.Millisecond, ReconnectMax: 200 * time.Millisecond}),
		fx.Supply(db),
		fxmodule.AsTopology(func() *topology.Topology { return topology.New().Queue(q, topology.Retry(inboxfxPolicy)) }),
		outbox.Module(outbox.WithSchema(s)),
		fxmodule.AsConsumer(func() fxmodule.Consumer {
			return fxmodule.Consumer{Queue: q, Standard: true, Inbox: true,
				Handler: mq.HandlerFunc(func(ctx context.Context, d *mq.Delivery) error {
					n := calls.Add(1)
					tx := outbox.Tx(ctx)
					if tx == nil {
						noTx.Add(1)
						return nil
					}
					if _, err := tx.ExecContext(ctx, "INSERT INTO "+effects+" (order_id) VALUES ($1)", d.MessageId); err != nil {
						return err
					}
					if n == 1 {
						return errors.New("the first attempt fails after its write")
					}
					return nil
				})}
		}),
	)
	app.RequireStart()
	testenv.Publish(t, helper, q, mq.Message{MessageId: "o-1"})
	deadline := time.Now().Add(15 * time.Second)
	for outboxCount(t, db, s.Inbox, "") == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	testenv.Publish(t, helper, q, mq.Message{MessageId: "o-1"})
	testenv.WaitCount(t, helper, q, 0, 15*time.Second)
	// Taken from the queue is not yet decided: wait until the inbox has
	// logged the redelivery as a duplicate, or the handler ran for it.
	testenv.Poll(15*time.Second, func() bool { return lg.Count(outbox.EventDuplicate) > 0 || calls.Load() > 2 })
	app.RequireStop()
	if n := noTx.Load(); n != 0 {
		t.Errorf("%d calls had no transaction (outbox.Tx nil): the consumer ran outside the inbox", n)
	}
	if n := outboxCount(t, db, s.Inbox, "queue = $1 AND key = 'o-1'", q); n != 1 {
		t.Errorf("%d records of o-1 in %s, want 1 (the inbox records in the schema given to outbox.Module)", n, s.Inbox)
	}
	if n := outboxCount(t, db, effects, ""); n != 1 {
		t.Errorf("%d effects, want 1: the failed attempt's write rolled back with it, and the redelivery is a duplicate", n)
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("the handler ran %d times, want 2 (a failed attempt, its retry; the duplicate unhandled)", n)
	}
}

// inboxfxSchema creates a PostgreSQL schema of its own for the test, with
// both tables in it, dropped (with everything in it) when the test ends.
func inboxfxSchema(t *testing.T, db *sql.DB) outbox.Schema {
	t.Helper()
	var b [4]byte
	_, _ = rand.Read(b[:])
	ns := "inboxfx_" + hex.EncodeToString(b[:])
	ctx := testenv.Context(t, 20*time.Second)
	if _, err := db.ExecContext(ctx, "CREATE SCHEMA "+ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if _, err := db.ExecContext(ctx, "DROP SCHEMA "+ns+" CASCADE"); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	s := outbox.Schema{Outbox: ns + ".outbox", Inbox: ns + ".inbox"}
	if err := s.Create(ctx, db); err != nil {
		t.Fatal(err)
	}
	return s
}

// Start checks the tables: with a table missing, or of another shape, the
// app's start fails within a second, naming the table with its schema.
// An app whose consumers do not use the inbox does not need its table.
func TestOutboxFxStartChecksTables(t *testing.T) {
	db := outboxOpen(t, outboxURL())
	helper := testenv.Broker(t, mq.Config{Logger: testenv.Discard()})
	for _, tc := range []struct {
		name  string
		inbox bool // a consumer runs in the inbox
		first bool // outbox.Module is given before fxmodule.Module
		spoil func(s outbox.Schema) string
		table func(s outbox.Schema) string
		want  string // in the error, besides the table
	}{
		{"inbox table missing", true, false, func(s outbox.Schema) string { return "DROP TABLE " + s.Inbox }, func(s outbox.Schema) string { return s.Inbox }, "does not exist"},
		{"inbox table missing, outbox.Module first", true, true, func(s outbox.Schema) string { return "DROP TABLE " + s.Inbox }, func(s outbox.Schema) string { return s.Inbox }, "does not exist"},
		{"outbox table missing", false, false, func(s outbox.Schema) string { return "DROP TABLE " + s.Outbox }, func(s outbox.Schema) string { return s.Outbox }, "does not exist"},
		{"outbox table of another shape", false, false, func(s outbox.Schema) string { return "ALTER TABLE " + s.Outbox + " DROP COLUMN set_aside_at" }, func(s outbox.Schema) string { return s.Outbox }, "set_aside_at"},
		{"inbox table of another shape", true, false, func(s outbox.Schema) string {
			return "DROP TABLE " + s.Inbox + "; CREATE TABLE " + s.Inbox + " (queue text, id text)"
		}, func(s outbox.Schema) string { return s.Inbox }, "key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testenv.NoLeaks(t)
			s := inboxfxSchema(t, db)
			if _, err := db.Exec(tc.spoil(s)); err != nil {
				t.Fatal(err)
			}
			// A message waits in the queue: the check comes before any
			// consumer starts, so nothing takes it.
			q, consumer, calls := outboxWaitingConsumer(t, helper, tc.inbox)
			modules := []fx.Option{fxmodule.Module, outbox.Module(outbox.WithSchema(s))}
			if tc.first {
				modules[0], modules[1] = modules[1], modules[0]
			}
			app := fx.New(fx.NopLogger, modules[0], modules[1], fxConfig(t), fx.Supply(db), consumer)
			ctx := testenv.Context(t, 30*time.Second)
			began := time.Now()
			err := app.Start(ctx)
			took := time.Since(began)
			if err == nil {
				_ = app.Stop(ctx)
				t.Fatalf("start succeeded with %s", tc.name)
			}
			_ = app.Stop(ctx)
			t.Logf("start failed after %v: %v", took, err)
			if took >= time.Second {
				t.Errorf("start failed after %v, want under 1 s", took)
			}
			if !strings.Contains(err.Error(), tc.table(s)) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not name %s and say %q", err, tc.table(s), tc.want)
			}
			if !errors.Is(err, outbox.ErrSchema) {
				t.Errorf("error %q does not match outbox.ErrSchema", err)
			}
			if n := calls.Load(); n != 0 {
				t.Errorf("the handler ran %d times: a consumer started before the check", n)
			}
			if ready, _ := fxCount(t, helper, q); ready != 1 {
				t.Errorf("%d messages ready in the queue after the failed start, want 1 (none taken)", ready)
			}
		})
	}
	t.Run("no inbox consumer, no inbox table", func(t *testing.T) {
		testenv.NoLeaks(t)
		s := inboxfxSchema(t, db)
		if _, err := db.Exec("DROP TABLE " + s.Inbox); err != nil {
			t.Fatal(err)
		}
		app := fxApp(t, fxConfig(t), fx.Supply(db), outbox.Module(outbox.WithSchema(s)))
		app.RequireStart()
		app.RequireStop()
	})
}

// An unqualified table name is named with the schema it was looked for in
// (the first of the search path), and a plain-Go Relay's Run and
// Schema.Check refuse the same at once.
func TestOutboxCheckPlainGo(t *testing.T) {
	db := outboxOpen(t, outboxURL())
	ctx := testenv.Context(t, 30*time.Second)
	var b [4]byte
	_, _ = rand.Read(b[:])
	missing := outbox.Schema{Outbox: "inboxfx_none_" + hex.EncodeToString(b[:]), Inbox: "inboxfx_none_in_" + hex.EncodeToString(b[:])}
	err := missing.Check(ctx, db)
	if err == nil || !errors.Is(err, outbox.ErrSchema) || !strings.Contains(err.Error(), "public."+missing.Outbox) || !strings.Contains(err.Error(), "public."+missing.Inbox) {
		t.Errorf("Check of two missing tables: %v, want ErrSchema naming public.%s and public.%s", err, missing.Outbox, missing.Inbox)
	}
	s := inboxfxSchema(t, db)
	if err := s.Check(ctx, db); err != nil {
		t.Errorf("Check of tables Create made: %v", err)
	}
	helper := testenv.Broker(t, mq.Config{Logger: testenv.Discard()})
	began := time.Now()
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err = outbox.NewRelay(db, helper, outbox.WithSchema(missing)).Run(rctx)
	if err == nil || !errors.Is(err, outbox.ErrSchema) || !strings.Contains(err.Error(), "public."+missing.Outbox) || time.Since(began) >= time.Second {
		t.Errorf("Run with a missing table: %v after %v, want ErrSchema naming public.%s at once", err, time.Since(began), missing.Outbox)
	}
}

// Without fx, a consumer built as the docs show (Broker, Consume with
// Standard and outbox.Inbox innermost) whose inbox table is missing, or of
// another shape, fails its Consume within a second with ErrSchema naming
// the table with its schema, and leaves the waiting message in its queue;
// before, Consume succeeded and the inbox took the missing table for an
// outage, holding the message for ever (TestInboxAuditOutageStillWaits
// keeps a database that does not answer an outage, waited out).
func TestInboxConsumeChecksTable(t *testing.T) {
	db := outboxOpen(t, outboxURL())
	ctx := testenv.Context(t, 30*time.Second)
	var r [4]byte
	_, _ = rand.Read(r[:])
	id := hex.EncodeToString(r[:])
	other := "goit_inbox_other_" + id
	if _, err := db.ExecContext(ctx, "CREATE TABLE "+other+" (queue text, key text)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = db.ExecContext(context.Background(), "DROP TABLE IF EXISTS "+other) })
	b := testenv.Broker(t, mq.Config{Logger: testenv.Discard()})
	for _, tc := range []struct{ table, want string }{
		{"goit_inbox_none_" + id, "public.goit_inbox_none_" + id + " does not exist"},
		{other, "public." + other + " is of another shape: it has no column received_at"},
	} {
		q := testenv.Queue(t, b, inboxfxPolicy, topology.Classic())
		testenv.Publish(t, b, q, mq.Message{MessageId: "waits"})
		var calls atomic.Int32
		began := time.Now()
		c, err := b.Consume(ctx, q, mq.HandlerFunc(func(context.Context, *mq.Delivery) error { calls.Add(1); return nil }),
			middleware.Standard(inboxfxPolicy), mq.WithMiddleware(outbox.Inbox(db, outbox.WithSchema(outbox.Schema{Inbox: tc.table}))))
		took := time.Since(began)
		t.Logf("inbox table %s: Consume returned after %v: %v", tc.table, took, err)
		if c != nil {
			testenv.Stop(t, c)
		}
		if err == nil || !errors.Is(err, outbox.ErrSchema) || !strings.Contains(err.Error(), tc.want) || took >= time.Second {
			t.Errorf("Consume with inbox table %s: %v after %v, want ErrSchema saying %q within a second", tc.table, err, took, tc.want)
		}
		if n := testenv.Count(t, b, q); n != 1 || calls.Load() != 0 {
			t.Errorf("inbox table %s: %d messages in %s and %d calls, want the message left there untaken", tc.table, n, q, calls.Load())
		}
	}
}
