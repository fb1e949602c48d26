//go:build integration || chaos

package integration

// Helpers of the outbox suites (issue 23), shared by the integration and
// the chaos files: every name here starts with outbox. The suites need
// PostgreSQL: the integration files the machine's (PG_URL, default
// 127.0.0.1:5432, database test; `make test` starts it when it does not
// answer), the chaos scenario one of its own. What they create is
// named goit_* and dropped afterwards.

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the pgx driver for database/sql

	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/outbox"
)

// outboxOpen opens url with the pgx driver, closed when the test ends; a
// database that does not answer within 10 s fails the test.
func outboxOpen(t testing.TB, url string) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		t.Fatalf("PostgreSQL at %s does not answer (run `make postgres`): %v", url, err)
	}
	return db
}

// outboxTables creates a goit_* pair of tables in db for the test and
// drops them when it ends.
func outboxTables(t testing.TB, db *sql.DB) outbox.Schema {
	t.Helper()
	var b [4]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	s := outbox.Schema{Outbox: "goit_outbox_" + id, Inbox: "goit_inbox_" + id}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.Create(ctx, db); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if _, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS "+s.Outbox+", "+s.Inbox); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	return s
}

// outboxCount is count(*) of table where cond ("" for all).
func outboxCount(t testing.TB, db *sql.DB, table, cond string, args ...any) int {
	t.Helper()
	q := "SELECT count(*) FROM " + table
	if cond != "" {
		q += " WHERE " + cond
	}
	var n int
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := db.QueryRowContext(ctx, q, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

// outboxWrite writes m to exchange/key through ob in one transaction of
// its own, with effect (nil: none) run in it first, and commits it (or
// rolls it back when commit is false).
func outboxWrite(ctx context.Context, db *sql.DB, ob *outbox.Outbox, exchange, key string, m mq.Message, commit bool, effect func(*sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // after Commit a no-op
	if effect != nil {
		if err := effect(tx); err != nil {
			return err
		}
	}
	if err := ob.Publish(ctx, tx, exchange, key, m); err != nil {
		return err
	}
	if !commit {
		return tx.Rollback()
	}
	return tx.Commit()
}
