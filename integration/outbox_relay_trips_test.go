//go:build integration

package integration

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/acemq/acemq-go/internal/testenv"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/outbox"
)

// outboxTrips records the round trips of the statements a relay's batch
// sends (begin, claim, delete, commit, rollback) on a pgx connection: one
// entry per query sent alone, one per pgx batch, each the kinds of the
// statements it carried.
type outboxTrips struct {
	mu    sync.Mutex
	trips [][]string
}

// outboxStatementKind names a relay batch's statement, "" for another.
func outboxStatementKind(sql string) string {
	s := strings.ToLower(strings.TrimSpace(sql))
	switch {
	case s == "begin" || strings.HasPrefix(s, "begin "):
		return "begin"
	case s == "commit":
		return "commit"
	case s == "rollback":
		return "rollback"
	case strings.Contains(s, "for update of o skip locked"):
		return "claim"
	case strings.HasPrefix(s, "delete from"):
		return "delete"
	}
	return ""
}

func (o *outboxTrips) add(sqls ...string) {
	var kinds []string
	for _, s := range sqls {
		if k := outboxStatementKind(s); k != "" {
			kinds = append(kinds, k)
		}
	}
	if len(kinds) == 0 {
		return
	}
	o.mu.Lock()
	o.trips = append(o.trips, kinds)
	o.mu.Unlock()
}

func (o *outboxTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	o.add(d.SQL)
	return ctx
}

func (o *outboxTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (o *outboxTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	var sqls []string
	for _, q := range d.Batch.QueuedQueries {
		sqls = append(sqls, q.SQL)
	}
	o.add(sqls...)
	return ctx
}

func (o *outboxTrips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

func (o *outboxTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// With the pgx driver a batch of the relay costs the database two round
// trips, not four: its begin goes with its claim, and its delete with its
// commit (the statements a batch sends are the same; they are only sent
// together); while a backlog drains, the next batch's begin and claim go
// with the commit, one round trip a batch. Before, each went alone: begin,
// claim, delete, commit, four round trips a batch that no longer hid
// behind the other loop's confirms once the broker confirmed fast.
func TestOutboxRelayBatchTwoRoundTrips(t *testing.T) {
	db, s, b, q, ctx := outboxRig(t, testenv.Discard())
	ob := outbox.New(outbox.WithSchema(s))
	const n = 120
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if err := ob.Publish(ctx, tx, "", q, mq.Message{MessageId: fmt.Sprint("trip-", i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}

	cfg, err := pgx.ParseConfig(outboxURL())
	if err != nil {
		t.Fatal(err)
	}
	trips := &outboxTrips{}
	cfg.Tracer = trips
	rdb := stdlib.OpenDB(*cfg)
	t.Cleanup(func() { _ = rdb.Close() })
	stop := outboxRelay(t, outbox.NewRelay(rdb, b, outbox.WithSchema(s), outbox.BatchSize(50)))
	testenv.WaitCount(t, b, q, n, 15*time.Second)
	testenv.Eventually(t, 10*time.Second, func() bool { return outboxCount(t, db, s.Outbox, "") == 0 }, "the outbox drained")
	stop()

	trips.mu.Lock()
	defer trips.mu.Unlock()
	var claims, deletes, chained int
	for _, tr := range trips.trips {
		joined := strings.Join(tr, "+")
		switch {
		case joined == "begin+claim":
			claims++
		case joined == "delete+commit":
			deletes++
		case joined == "delete+commit+begin+claim":
			chained++
		case joined == "rollback": // a batch that claimed nothing
		default:
			t.Errorf("a round trip of %s", joined)
		}
	}
	// Three batches at least (120 rows in batches of 50), each claimed
	// and deleted; the first full one claims the next with its commit.
	if claims+chained < 3 || deletes+chained < 3 || chained < 1 {
		t.Errorf("round trips for %d rows in batches of 50: %d begin+claim, %d delete+commit, %d delete+commit+begin+claim: %v",
			n, claims, deletes, chained, trips.trips)
	}
}

// outboxOtherDriver is the pgx driver behind a database/sql driver of
// another name whose connections do not give their pgx connection (no
// Conn method), as any other PostgreSQL driver's do not: a relay on it
// runs every statement through database/sql and only polls.
type outboxOtherDriver struct{ begins *atomic.Int64 }

// outboxDriverConn is what a stdlib connection offers database/sql,
// without its Conn method.
type outboxDriverConn interface {
	driver.Conn
	driver.ConnBeginTx
	driver.ConnPrepareContext
	driver.ExecerContext
	driver.QueryerContext
	driver.NamedValueChecker
	driver.Pinger
	driver.SessionResetter
}

type outboxOtherConn struct {
	outboxDriverConn
	begins *atomic.Int64
}

func (c outboxOtherConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	c.begins.Add(1)
	return c.outboxDriverConn.BeginTx(ctx, opts)
}

func (d outboxOtherDriver) Open(name string) (driver.Conn, error) {
	c, err := stdlib.GetDefaultDriver().Open(name)
	if err != nil {
		return nil, err
	}
	return outboxOtherConn{outboxDriverConn: c.(outboxDriverConn), begins: d.begins}, nil
}

var (
	outboxOtherOnce   sync.Once
	outboxOtherBegins atomic.Int64
)

// A relay on a driver that is not pgx keeps its other path (a
// database/sql transaction, a round trip a statement, and a probe through
// the pool): rows of two ordering keys go out each in its key's order,
// rows without a key go out too, a row the broker refuses is set aside,
// and nothing else is left.
func TestOutboxRelayOtherDriver(t *testing.T) {
	outboxOtherOnce.Do(func() { sql.Register("acemq-goit-other-pg", outboxOtherDriver{begins: &outboxOtherBegins}) })
	db, s, b, q, ctx := outboxRig(t, testenv.Discard())
	ob := outbox.New(outbox.WithSchema(s), outbox.OrderBy(func(_, _ string, m *mq.Message) string { return m.Type }))
	const each = 30
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range each {
		for _, key := range []string{"a", "b", ""} {
			if err := ob.Publish(ctx, tx, "", q, mq.Message{MessageId: fmt.Sprintf("%s-%03d", key, i), Type: key}); err != nil {
				t.Fatal(err)
			}
		}
		if i == each/2 {
			if err := ob.Publish(ctx, tx, testenv.Name(t, "missing"), "x", mq.Message{MessageId: "lost-exchange"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	other, err := sql.Open("acemq-goit-other-pg", outboxURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Close() })
	begins := outboxOtherBegins.Load()

	var mu sync.Mutex
	seen := map[string]int{}
	last := map[string]int{}
	var disorder []string
	c, err := b.Consume(ctx, q, mq.HandlerFunc(func(_ context.Context, d *mq.Delivery) error {
		var i int
		fmt.Sscanf(d.MessageId[strings.IndexByte(d.MessageId, '-')+1:], "%d", &i)
		mu.Lock()
		defer mu.Unlock()
		if d.Type != "" && seen[d.MessageId] == 0 {
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
	outboxRelay(t, outbox.NewRelay(other, b, outbox.WithSchema(s), outbox.BatchSize(16), outbox.MaxAttempts(1)))
	testenv.Eventually(t, 30*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(seen) == 3*each },
		"all %d rows delivered", 3*each)
	testenv.Stop(t, c)
	testenv.Eventually(t, 10*time.Second, func() bool { return outboxCount(t, db, s.Outbox, "") == 1 }, "only the refused row left")
	var lastErr string
	var aside bool
	if err := db.QueryRowContext(ctx, "SELECT last_error, set_aside_at IS NOT NULL FROM "+s.Outbox).Scan(&lastErr, &aside); err != nil {
		t.Fatal(err)
	}
	if !aside || (!strings.Contains(lastErr, "404") && !strings.Contains(strings.ToLower(lastErr), "not found")) {
		t.Errorf("the refused row: set aside %v, last_error %q", aside, lastErr)
	}
	if len(disorder) > 0 {
		t.Errorf("%d rows out of their key's order, e.g. %v", len(disorder), disorder[:min(5, len(disorder))])
	}
	if n := outboxOtherBegins.Load() - begins; n < 6 {
		t.Errorf("%d transactions begun through database/sql for %d rows in batches of 16", n, 3*each+1)
	}
}
