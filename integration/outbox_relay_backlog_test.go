//go:build integration

package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/acemq/acemq-go/internal/testenv"
	"github.com/acemq/acemq-go/outbox"
)

// A backlog is drained reading the pending index in id order, whatever
// the table's statistics say, from the relay's first claim on. Statistics taken while the table was empty
// (the usual state of an outbox) made every claim of a backlog read and
// sort every pending row, and every delete read the whole table to find
// its batch: the rows the table gave out grew with the square of the
// backlog (before the fix: 52.8 rows read per row relayed for 4 000 rows
// in batches of 50; after: 7.5), and each batch took time in proportion
// to what was left.
func TestOutboxRelayBacklogClaimsInIndexOrder(t *testing.T) {
	db, s, b, q, ctx := outboxRig(t, testenv.Discard())
	const n, batch = 4000, 50
	// Autovacuum off for this table only, so that no analyze during the
	// test corrects the statistics of the empty table taken here.
	if _, err := db.ExecContext(ctx, fmt.Sprintf(`ALTER TABLE %[1]s SET (autovacuum_enabled = false); ANALYZE %[1]s`, s.Outbox)); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, fmt.Sprintf(`INSERT INTO %s (exchange, routing_key, message_id, body, properties)
SELECT '', $1, 'backlog-' || g, convert_to('{"n":' || g || '}', 'UTF8'), '{"content_type":"application/json"}'
FROM generate_series(1, $2) g`, s.Outbox), q, n); err != nil {
		t.Fatal(err)
	}
	read := func() int64 {
		t.Helper()
		var v int64
		if err := db.QueryRowContext(ctx, `SELECT COALESCE(seq_tup_read, 0) + COALESCE(idx_tup_fetch, 0) FROM pg_stat_user_tables WHERE relname = $1`, s.Outbox).Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	before := read()

	// The relay gets a pool of its own, closed once it is done: a backend
	// reports its table statistics when it ends.
	rdb := outboxOpen(t, outboxURL())
	stop := outboxRelay(t, outbox.NewRelay(rdb, b, outbox.WithSchema(s), outbox.BatchSize(batch), outbox.PollInterval(time.Minute)))
	// Waiting reads one row a time (EXISTS), not the table (count).
	pending := func() bool {
		t.Helper()
		var any bool
		if err := db.QueryRowContext(ctx, "SELECT EXISTS (SELECT 1 FROM "+s.Outbox+")").Scan(&any); err != nil {
			t.Fatal(err)
		}
		return any
	}
	deadline := time.Now().Add(3 * time.Minute)
	for pending() {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d rows still in the outbox after 3 min", outboxCount(t, db, s.Outbox, ""), n)
		}
		time.Sleep(100 * time.Millisecond)
	}
	stop()
	if err := rdb.Close(); err != nil {
		t.Fatal(err)
	}
	// The ended backends' reports land within moments; wait until two
	// readings a second apart agree.
	got := read()
	for range 10 {
		time.Sleep(time.Second)
		again := read()
		if again == got {
			break
		}
		got = again
	}
	var seqScans, seqRead, idxScans, idxFetch int64
	_ = db.QueryRowContext(ctx, `SELECT seq_scan, seq_tup_read, COALESCE(idx_scan, 0), COALESCE(idx_tup_fetch, 0) FROM pg_stat_user_tables WHERE relname = $1`, s.Outbox).Scan(&seqScans, &seqRead, &idxScans, &idxFetch)
	t.Logf("sequential scans %d reading %d rows, index scans %d fetching %d rows", seqScans, seqRead, idxScans, idxFetch)
	perRow := float64(got-before) / n
	t.Logf("%d rows relayed in batches of %d: %.1f rows read per row relayed", n, batch, perRow)
	// In index order each claim reads its batch (and the rows other claims
	// hold), each delete its batch, and the relay's one gauge refresh the
	// whole table once (measured: 3.6). Sorting every pending row reads
	// n/batch/2 per row, 40 here; first claims that sort it (one per loop,
	// a relay started into a backlog) add 2 (measured: 7.6).
	if perRow > 5 {
		t.Errorf("%.1f rows read per row relayed, want at most 5: the claims read the backlog rather than the pending index in order", perRow)
	}
	var left int
	if err := db.QueryRowContext(context.WithoutCancel(ctx), "SELECT count(*) FROM "+s.Outbox).Scan(&left); err != nil || left != 0 {
		t.Fatalf("rows left %d (%v)", left, err)
	}
}
