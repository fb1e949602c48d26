//go:build integration

package integration

// The outbox on a database/sql driver other than pgx (issue 39, item 5):
// github.com/lib/pq, a test dependency of this module only. The relay
// sends each committed row once and deletes it, rows of an ordering key
// in their order; the inbox tells a refused value, an aborted transaction
// and an outage apart as it does with pgx. This file's names start with
// libpq.

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/lib/pq" // the "postgres" driver
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/internal/testenv"
	"github.com/acemq/acemq-go/middleware"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/mqtest"
	"github.com/acemq/acemq-go/outbox"
)

// libpqOpen opens url with lib/pq, closed when the test ends.
func libpqOpen(t *testing.T, url string) *sql.DB {
	t.Helper()
	if !strings.Contains(url, "sslmode=") {
		sep := "?"
		if strings.Contains(url, "?") {
			sep = "&"
		}
		url += sep + "sslmode=disable" // lib/pq asks for TLS by default
	}
	db, err := sql.Open("postgres", url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// A relay on lib/pq publishes each committed row once and deletes it:
// rows without a key, rows of two ordering keys (each key in its order),
// and sets aside a row the broker refuses. Before, every delete failed
// (`sql: converting argument $1 type: unsupported type []int64`), so the
// rows stayed and went out again and again, and rows of an ordering key
// failed to be read (`unnest($1::text[], …)` with a []string).
func TestOutboxRelayLibPQ(t *testing.T) {
	db, s, b, q, ctx := outboxRig(t, testenv.Discard())
	pq := libpqOpen(t, outboxURL())
	ob := outbox.New(outbox.WithSchema(s), outbox.OrderBy(func(_, _ string, m *mq.Message) string { return m.Type }))
	const each = 5
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Keys with the characters a text array literal would have to quote.
	keys := []string{"", `k"1`, `k\2,{x}`}
	for i := range each {
		for _, key := range keys {
			if err := ob.Publish(ctx, tx, "", q, mq.Message{MessageId: fmt.Sprintf("%d-%s", i, key), Type: key}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := ob.Publish(ctx, tx, testenv.Name(t, "missing"), "x", mq.Message{MessageId: "lost-exchange"}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[string]int{}
	next := map[string]int{}
	var disorder []string
	c, err := b.Consume(ctx, q, mq.HandlerFunc(func(_ context.Context, d *mq.Delivery) error {
		var i int
		fmt.Sscanf(d.MessageId, "%d-", &i)
		mu.Lock()
		defer mu.Unlock()
		if d.Type != "" && seen[d.MessageId] == 0 {
			if i != next[d.Type] {
				disorder = append(disorder, d.MessageId)
			}
			next[d.Type] = i + 1
		}
		seen[d.MessageId]++
		return nil
	}), mq.WithConcurrency(1), mq.WithPrefetch(1))
	if err != nil {
		t.Fatal(err)
	}
	outboxRelay(t, outbox.NewRelay(pq, b, outbox.WithSchema(s), outbox.MaxAttempts(1), outbox.PollInterval(100*time.Millisecond)))
	want := each * len(keys)
	deadline := time.Now().Add(20 * time.Second)
	for outboxCount(t, db, s.Outbox, "set_aside_at IS NULL") > 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if n := outboxCount(t, db, s.Outbox, "set_aside_at IS NULL"); n > 0 {
		t.Errorf("%d rows still pending after 20 s", n)
	} else {
		time.Sleep(time.Second) // a row sent again would arrive by now
	}
	testenv.Stop(t, c)
	mu.Lock()
	total := 0
	for _, n := range seen {
		total += n
	}
	if len(seen) != want || total != want {
		t.Errorf("%d deliveries of %d messages, want %d of %d: each committed row once", total, len(seen), want, want)
	}
	if len(disorder) > 0 {
		t.Errorf("rows out of their key's order: %v", disorder)
	}
	if n := outboxCount(t, db, s.Outbox, ""); n != 1 {
		t.Errorf("%d rows left, want only the refused one (set aside)", n)
	}
	mu.Unlock()

	// A writer on lib/pq: the row keeps its properties and headers.
	got := make(chan *mq.Delivery, 1)
	c, err = b.Consume(ctx, q, mq.HandlerFunc(func(_ context.Context, d *mq.Delivery) error {
		select {
		case got <- d:
		default:
		}
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer testenv.Stop(t, c)
	m := mq.Message{MessageId: "written-by-libpq", ContentType: "text/plain", Body: []byte("b\x00dy"),
		Headers: amqp.Table{"n": int32(7), "s": "x"}}
	if err := outboxWrite(ctx, pq, ob, "", q, m, true, nil); err != nil {
		t.Errorf("Publish through lib/pq: %v", err)
		return
	}
	select {
	case d := <-got:
		if d.MessageId != m.MessageId || d.ContentType != m.ContentType || string(d.Body) != string(m.Body) ||
			d.Headers["n"] != int32(7) || d.Headers["s"] != "x" {
			t.Errorf("written through lib/pq, arrived as id %q type %q body %q headers %v", d.MessageId, d.ContentType, d.Body, d.Headers)
		}
	case <-time.After(10 * time.Second):
		t.Errorf("the row written through lib/pq was not delivered within 10 s")
	}
}

// libpqInboxCase is one failure the inbox classifies, run with one driver.
type libpqInboxCase struct {
	name string
	// handler runs in the inbox's transaction.
	handler func(ctx context.Context, table string) error
	// check says what is wrong with Handle's error (empty: nothing).
	check func(err error, failedLogs int) string
}

// The inbox classifies lib/pq's errors as it does pgx's: a value refused
// at the commit (a deferred unique constraint, SQLSTATE 23505) is
// rejected (straight to .dlq); a commit of a transaction a failed
// statement aborted fails with ErrTxAborted; a database that cannot be
// reached is an outage, waited out (acemq.inbox.failed, then a requeue
// when the delivery's context ends). Before, both of lib/pq's first two
// were taken for an outage, so the delivery was held and run again for
// ever.
func TestInboxLibPQClassifies(t *testing.T) {
	url := outboxURL()
	pgx := outboxOpen(t, url)
	s := outboxTables(t, pgx)
	table := s.Outbox + "_effects"
	ctx := testenv.Context(t, time.Minute)
	if _, err := pgx.ExecContext(ctx, `CREATE TABLE `+table+` (v int UNIQUE DEFERRABLE INITIALLY DEFERRED); INSERT INTO `+table+` VALUES (1)`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = pgx.ExecContext(context.Background(), "DROP TABLE IF EXISTS "+table) })
	cases := []libpqInboxCase{
		{"refused value", func(ctx context.Context, table string) error {
			_, err := outbox.Tx(ctx).ExecContext(ctx, `INSERT INTO `+table+` VALUES (1)`) // fails at the commit
			return err
		}, func(err error, _ int) string {
			if !middleware.IsReject(err) || !strings.Contains(err.Error(), "23505") {
				return "want a rejection naming SQLSTATE 23505"
			}
			return ""
		}},
		{"aborted transaction", func(ctx context.Context, table string) error {
			_, _ = outbox.Tx(ctx).ExecContext(ctx, `SELECT 1/0`) // the failure the handler tolerates
			return nil
		}, func(err error, _ int) string {
			if !errors.Is(err, outbox.ErrTxAborted) {
				return "want outbox.ErrTxAborted"
			}
			return ""
		}},
	}
	refused := "postgres://postgres@127.0.0.1:1/test"
	for _, driver := range []string{"pgx", "lib/pq"} {
		open := func(url string) *sql.DB {
			if driver == "pgx" {
				db, err := sql.Open("pgx", url)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = db.Close() })
				return db
			}
			return libpqOpen(t, url)
		}
		db := open(url)
		all := append(libpqCopy(cases), libpqInboxCase{"outage", func(context.Context, string) error { return nil },
			func(err error, failed int) string {
				if !errors.Is(err, mq.ErrRequeue) || failed < 2 {
					return "want a requeue after the inbox waited (acemq.inbox.failed logged at least twice)"
				}
				return ""
			}})
		for i, tc := range all {
			t.Run(driver+"/"+tc.name, func(t *testing.T) {
				use := db
				if tc.name == "outage" {
					use = open(refused)
				}
				var logs bytes.Buffer
				var mu sync.Mutex
				log := slog.New(slog.NewTextHandler(&libpqWriter{w: &logs, mu: &mu}, nil))
				h := outbox.Inbox(use, outbox.WithSchema(s))(mq.HandlerFunc(func(ctx context.Context, _ *mq.Delivery) error {
					return tc.handler(ctx, table)
				}))
				d := mqtest.NewDelivery("goit.libpq", amqp.Delivery{MessageId: fmt.Sprintf("%s-%d", driver, i)}, mqtest.Logger(log))
				hctx, cancel := context.WithTimeout(ctx, 3*time.Second)
				defer cancel()
				start := time.Now()
				err := h.Handle(hctx, d)
				mu.Lock()
				failed := strings.Count(logs.String(), outbox.EventInboxFailed)
				mu.Unlock()
				if why := tc.check(err, failed); why != "" {
					t.Errorf("%s with %s: Handle returned %v after %v (%d× %s): %s", tc.name, driver, err,
						time.Since(start).Round(time.Millisecond), failed, outbox.EventInboxFailed, why)
				}
			})
		}
	}
}

// libpqCopy copies cases, so appending to the copy leaves them alone.
func libpqCopy(cases []libpqInboxCase) []libpqInboxCase {
	return append([]libpqInboxCase(nil), cases...)
}

// libpqWriter serialises writes to w.
type libpqWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *libpqWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
