//go:build integration

package integration

import (
	"context"
	"database/sql"
	"log/slog"
	"testing"
	"time"

	"github.com/acemq/acemq-go/outbox"
)

// setAsideSeen is a log handler that, when the relay logs a row set
// aside, reads that row from another connection: whether the set-aside is
// committed when it is logged.
type setAsideSeen struct {
	db    *sql.DB
	table string
	seen  chan bool // set_aside_at as another session sees it at the log
}

func (h setAsideSeen) Enabled(context.Context, slog.Level) bool { return true }
func (h setAsideSeen) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h setAsideSeen) WithGroup(string) slog.Handler            { return h }

func (h setAsideSeen) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == outbox.EventSetAside {
		var id int64
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "row" {
				id = a.Value.Int64()
			}
			return true
		})
		var aside bool
		_ = h.db.QueryRowContext(context.WithoutCancel(ctx), `SELECT set_aside_at IS NOT NULL FROM `+h.table+` WHERE id = $1`, id).Scan(&aside)
		select {
		case h.seen <- aside:
		default:
		}
	}
	return nil
}

// The relay logs a row set aside once the transaction that sets it aside
// has committed: whoever reads the log and then the table finds the row
// set aside, not still pending.
func TestOutboxRelaySetAsideLoggedAfterCommit(t *testing.T) {
	db := outboxOpen(t, outboxURL())
	s := outboxTables(t, db)
	h := setAsideSeen{db: db, table: s.Outbox, seen: make(chan bool, 1)}
	_, _, b, q, ctx := outboxRig(t, slog.New(h))
	// A header value of a type no one wrote: the wire cannot carry the
	// row, so the relay sets it aside on its first attempt.
	if _, err := db.ExecContext(ctx, `INSERT INTO `+s.Outbox+` (exchange, routing_key, body, properties)
VALUES ('', $1, '\x', '{"headers":{"h":{"t":"nonesuch"}}}')`, q); err != nil {
		t.Fatal(err)
	}
	outboxRelay(t, outbox.NewRelay(db, b, outbox.WithSchema(s), outbox.PollInterval(100*time.Millisecond)))
	select {
	case aside := <-h.seen:
		if !aside {
			t.Fatal("the row was logged as set aside while another session still saw it pending: logged before the commit")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no set-aside logged within 30 s")
	}
}
