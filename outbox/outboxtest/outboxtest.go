package outboxtest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver New opens

	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/mqtest"
	"github.com/acemq/acemq-go/outbox"
)

// DefaultURL is the PostgreSQL New uses when PG_URL is not set.
const DefaultURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// setupTimeout bounds New's and Close's statements.
const setupTimeout = 30 * time.Second

// DB is a PostgreSQL schema of one test's own, holding the outbox's
// tables, and a *sql.DB whose every connection works in it (its
// search_path is that schema alone): unqualified names, the outbox's
// tables' and the test's own, are the schema's.
type DB struct {
	*sql.DB
	// Schema is the PostgreSQL schema's name: outboxtest_ and random hex.
	Schema string
	// Tables are the outbox's tables New created in it.
	Tables outbox.Schema

	tb testing.TB
}

// New creates a PostgreSQL schema for the test with the tables of
// tables (none: the default names) and returns it, dropped with
// everything in it when the test ends (Close, through tb.Cleanup). Table
// names must be unqualified, or they would name tables outside the
// schema. A failure fails tb; with a nil tb (in an Example) New panics
// instead, and the caller closes the DB.
func New(tb testing.TB, tables ...outbox.Schema) *DB {
	if tb != nil {
		tb.Helper()
	}
	d := &DB{tb: tb}
	switch len(tables) {
	case 0:
	case 1:
		d.Tables = tables[0]
	default:
		d.fatalf("outboxtest.New: give at most one outbox.Schema, not %d", len(tables))
	}
	for _, n := range []string{d.Tables.Outbox, d.Tables.Inbox} {
		if strings.Contains(n, ".") {
			d.fatalf("outboxtest.New: table %q is schema-qualified: it would be outside the test's schema; give it unqualified", n)
		}
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	d.Schema = "outboxtest_" + hex.EncodeToString(b[:])
	base := os.Getenv("PG_URL")
	if base == "" {
		base = DefaultURL
	}
	db, err := sql.Open("pgx", withSearchPath(base, d.Schema))
	if err != nil {
		d.fatalf("outboxtest.New: %v", err)
	}
	d.DB = db
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close()
		d.fatalf("outboxtest.New: PostgreSQL at %s does not answer (PG_URL; `make postgres`): %v", mq.Redact(base), err)
	}
	if _, err := db.ExecContext(ctx, "CREATE SCHEMA "+d.Schema); err != nil {
		_ = db.Close()
		d.fatalf("outboxtest.New: %v", err)
	}
	if tb != nil {
		tb.Cleanup(func() {
			if err := d.Close(); err != nil {
				tb.Errorf("outboxtest: %v", err)
			}
		})
	}
	if err := d.Tables.Create(ctx, db); err != nil {
		d.fatalf("outboxtest.New: %v", err)
	}
	return d
}

// Close drops the schema with everything in it and closes the DB. New
// registers it with the test's Cleanup; calling it again does nothing.
func (d *DB) Close() error {
	if d.DB == nil {
		return nil
	}
	db := d.DB
	d.DB = nil
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	if _, err := db.ExecContext(ctx, "DROP SCHEMA IF EXISTS "+d.Schema+" CASCADE"); err != nil {
		return fmt.Errorf("drop schema %s: %w", d.Schema, err)
	}
	return nil
}

// Inbox is outbox.Inbox over the DB's tables: the inbox to run an fx
// app's consumer with in a test, in place of the app's
// (fxmoduletest.ConsumerWithInbox). An inbox of other options (KeyBy,
// say) is outbox.Inbox(d.DB, outbox.WithSchema(d.Tables), …).
func (d *DB) Inbox() mq.Middleware {
	return outbox.Inbox(d.DB, outbox.WithSchema(d.Tables))
}

// Consumer returns mqtest's fake consumer of queue running h inside opts
// and, innermost, the DB's inbox (Inbox): each delivery runs in a
// transaction that h reaches with outbox.Tx(ctx), as in production; what
// h writes with it commits with the delivery's record when h returns
// nil, and a delivery of a message id recorded already is acknowledged
// without calling h. mqtest.New's rules apply (a nil tb panics).
func (d *DB) Consumer(tb testing.TB, queue string, h mq.Handler, opts ...mq.ConsumerOption) *mqtest.Consumer {
	if tb != nil {
		tb.Helper()
	}
	return mqtest.New(tb, queue, h, append(opts, mq.WithMiddleware(d.Inbox()))...)
}

func (d *DB) fatalf(format string, args ...any) {
	if d.tb == nil {
		panic(fmt.Sprintf(format, args...))
	}
	d.tb.Helper()
	d.tb.Fatalf(format, args...)
}

// withSearchPath is the connection string s with search_path set to
// schema, as a URL's query parameter or a keyword/value pair.
func withSearchPath(s, schema string) string {
	if u, err := url.Parse(s); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		q := u.Query()
		q.Set("search_path", schema)
		u.RawQuery = q.Encode()
		return u.String()
	}
	return s + " search_path=" + schema
}
