//go:build integration

package outboxtest_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/acemq/acemq-go/fxmodule"
	"github.com/acemq/acemq-go/fxmodule/fxmoduletest"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/mqtest"
	"github.com/acemq/acemq-go/outbox"
	"github.com/acemq/acemq-go/outbox/outboxtest"
	"github.com/acemq/acemq-go/retry"
	"github.com/acemq/acemq-go/topology"
)

// bill is a handler as a service writes it: its effect goes through the
// inbox's transaction, with no nil guard for tests.
func bill(ctx context.Context, d *mq.Delivery) error {
	_, err := outbox.Tx(ctx).ExecContext(ctx, `INSERT INTO invoices (order_id) VALUES ($1)`, string(d.Body))
	return err
}

func count(t *testing.T, db *sql.DB, table string) int {
	t.Helper()
	var n int
	if err := db.QueryRowContext(t.Context(), "SELECT count(*) FROM "+table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func invoices(t *testing.T, db *outboxtest.DB) {
	t.Helper()
	if _, err := db.ExecContext(t.Context(), `CREATE TABLE invoices (order_id text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
}

// A handler that uses outbox.Tx runs as it runs in production: its write
// commits with the inbox's record, and the same message delivered again is
// acknowledged without calling it, so its effect happens once. On mqtest
// alone the same handler finds no transaction (outbox.Tx is nil) and
// panics: the consumer would requeue every delivery.
func TestConsumerSuppressesRedelivery(t *testing.T) {
	db := outboxtest.New(t)
	invoices(t, db)

	if r := mqtest.New(t, "billing.orders", mq.HandlerFunc(bill)).Deliver(mq.Message{MessageId: "m-1", Body: []byte("o-1")}); r.Outcome != mq.OutcomeRequeue {
		t.Fatalf("on mqtest alone: %v, want a requeue (the handler's nil transaction)", r)
	}

	c := db.Consumer(t, "billing.orders", mq.HandlerFunc(bill))
	m := mq.Message{MessageId: "m-1", Body: []byte("o-1")}
	if r := c.Deliver(m); r.Outcome != mq.OutcomeAck || r.Attempts != 1 {
		t.Fatalf("first delivery: %v, want ack after 1 attempt", r)
	}
	if r := c.Deliver(m); r.Outcome != mq.OutcomeAck || r.Attempts != 0 {
		t.Fatalf("redelivery: %v, want ack without calling the handler", r)
	}
	if n := count(t, db.DB, "invoices"); n != 1 {
		t.Fatalf("%d invoices after the message came twice, want 1", n)
	}
	if n := count(t, db.DB, outbox.DefaultInboxTable); n != 1 {
		t.Fatalf("%d inbox records, want 1", n)
	}
}

// A handler's error rolls its write back with the inbox's record, so the
// retry runs it again; here through the chain an fx app runs
// (fxmoduletest.ConsumerWithInbox, middleware.Standard with the
// topology's policy), the inbox where Inbox: true puts the app's.
func TestConsumerRollsBackWithFxmoduletest(t *testing.T) {
	db := outboxtest.New(t, outbox.Schema{Inbox: "billing_inbox", Outbox: "billing_outbox"})
	invoices(t, db)
	fails := 1
	h := mq.HandlerFunc(func(ctx context.Context, d *mq.Delivery) error {
		if err := bill(ctx, d); err != nil {
			return err
		}
		if fails > 0 {
			fails--
			return errors.New("the carrier is down") // after the write: it must roll back
		}
		return nil
	})
	topo := topology.New().Queue("billing.orders", topology.Retry(retry.Exponential(3, time.Second)))
	c := fxmoduletest.ConsumerWithInbox(t, db.Inbox(), fxmodule.Consumer{Queue: "billing.orders", Handler: h, Standard: true, Inbox: true}, topo)
	m := mq.Message{MessageId: "m-2", Body: []byte("o-2")}
	rs := c.Run(m)
	if last := rs[len(rs)-1]; last.Outcome != mq.OutcomeAck {
		t.Fatalf("the message ended %v, want ack", last)
	}
	attempts := 0
	for _, r := range rs {
		attempts += r.Attempts
	}
	if attempts != 2 {
		t.Fatalf("handler ran %d times (%v), want the failed attempt and its retry", attempts, rs)
	}
	if n := count(t, db.DB, "invoices"); n != 1 {
		t.Fatalf("%d invoices after a failed attempt and a retry, want 1 (the failed one rolled back)", n)
	}
	if r := c.Deliver(m); r.Outcome != mq.OutcomeAck || r.Attempts != 0 {
		t.Fatalf("redelivery: %v, want ack without calling the handler", r)
	}
	if n := count(t, db.DB, "billing_inbox"); n != 1 {
		t.Fatalf("%d records in billing_inbox, want 1", n)
	}
}

// The schema is the test's own while it runs and is gone after it, with
// everything in it.
func TestNewDropsTheSchema(t *testing.T) {
	var name string
	t.Run("inner", func(t *testing.T) {
		db := outboxtest.New(t)
		name = db.Schema
		invoices(t, db)
		var where string
		if err := db.QueryRowContext(t.Context(), `SELECT table_schema FROM information_schema.tables WHERE table_name = 'invoices' AND table_schema = current_schema()`).Scan(&where); err != nil || where != name {
			t.Fatalf("invoices in schema %q (%v), want %q", where, err, name)
		}
	})
	other := outboxtest.New(t)
	var n int
	if err := other.QueryRowContext(t.Context(), `SELECT count(*) FROM pg_namespace WHERE nspname = $1`, name).Scan(&n); err != nil || n != 0 {
		t.Fatalf("schema %s after its test: %d (%v), want gone", name, n, err)
	}
}

// A schema-qualified table name would be outside the test's schema: New
// refuses it.
func TestNewRefusesQualifiedTables(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("New took a schema-qualified table")
		}
	}()
	outboxtest.New(nil, outbox.Schema{Inbox: "billing.inbox"})
}
