package outbox

import (
	"cmp"
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/propagation"

	"github.com/acemq/acemq-go/fxmodule"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/otelmq"
)

// Relay publishes the outbox table's committed rows through the broker's
// confirmed publishers, one per exchange it publishes to (at most 64 open
// at once, so 64 channels: the least recently used idle one is closed),
// and deletes each row only once the broker has confirmed it. Run drives
// it; any number of relays, in one process or many, may share a table.
type Relay struct {
	db     *sql.DB
	b      *mq.Broker
	c      config
	schema Schema
	err    error
	log    *slog.Logger
	m      *relayMetrics
	q      relayQueries

	mu      sync.Mutex
	freed   *sync.Cond // a publisher was released
	pubs    map[string]*pubEntry
	closing int    // publishers being closed, still holding their channels
	tick    uint64 // orders the publishers' last use

	fails failures // refusals since the last row published (Check)

	busy atomic.Int32  // loops in a batch now (the probe rests while all are)
	idle chan struct{} // a loop left its batch (see rest)
}

type relayQueries struct {
	claim, indexOrder, probe, blockers, del, fail, stats string
}

// NewRelay returns a relay of the outbox table in db to b, which writes its
// events to b's logger (Broker.Logger, from mq.Config.Logger). Options:
// WithSchema, WithMeterProvider, WithPropagators,
// PollInterval, BatchSize, MaxAttempts, PublishTimeout, WithTopology,
// WithPublisherOptions.
//
// db should be opened with the pgx driver (github.com/jackc/pgx/v5/stdlib):
// the relay then holds one of db's connections to LISTEN on, for as long
// as it runs, and uses up to two more for its batches (two are in flight
// at once), so db's pool needs room for three. With another driver it
// only polls.
func NewRelay(db *sql.DB, b *mq.Broker, opts ...RelayOption) *Relay {
	c := newConfig(opts, RelayOption.applyRelay)
	s, err := c.schema.resolved()
	log := slog.Default()
	if b != nil {
		log = b.Logger()
	}
	t := s.Outbox
	r := &Relay{db: db, b: b, c: c, schema: s, err: err, log: log, m: newRelayMetrics(c.mp),
		pubs: map[string]*pubEntry{}, idle: make(chan struct{}, 1),
		q: relayQueries{
			// A row whose key's first pending row waits for its retry could
			// not be sent (the order), so it is not claimed: such rows would
			// otherwise fill every batch and hold up every other key.
			// The claim also bounds its transaction (bound, in the same
			// round trip): see run.
			claim: fmt.Sprintf(`WITH bound AS MATERIALIZED (SELECT set_config('idle_in_transaction_session_timeout', $2, true),
set_config('statement_timeout', $2, true), set_config('synchronous_commit', 'off', true))
SELECT o.id, o.exchange, o.routing_key, o.ordering_key, o.body, o.properties, o.trace, o.attempts FROM %[1]s o, bound
WHERE o.set_aside_at IS NULL AND (o.retry_at IS NULL OR o.retry_at <= now())
AND (o.ordering_key = '' OR COALESCE((SELECT h.retry_at FROM %[1]s h WHERE h.ordering_key = o.ordering_key AND h.ordering_key <> ''
AND h.set_aside_at IS NULL ORDER BY h.id LIMIT 1), '-infinity') <= now())
ORDER BY o.id LIMIT $1 FOR UPDATE OF o SKIP LOCKED`, t),
			// See batch: a backlog's claims read the pending index in order.
			indexOrder: `SELECT set_config('enable_sort', 'off', true), set_config('enable_seqscan', 'off', true)`,
			probe:      fmt.Sprintf(`SELECT COALESCE(max(id), 0) FROM %s WHERE set_aside_at IS NULL`, t),
			blockers: fmt.Sprintf(`SELECT o.id, o.ordering_key FROM %s o JOIN jsonb_to_recordset($1::text::jsonb) AS k(key text, maxid bigint)
ON o.ordering_key = k.key AND o.id <= k.maxid WHERE o.set_aside_at IS NULL`, t),
			del: fmt.Sprintf(`DELETE FROM %s WHERE id = ANY($1::text::bigint[])`, t),
			fail: fmt.Sprintf(`UPDATE %s SET attempts = attempts + 1, last_error = $2, retry_at = now() + make_interval(secs => $3),
set_aside_at = CASE WHEN $4 THEN now() END WHERE id = $1`, t),
			stats: fmt.Sprintf(`SELECT count(*) FILTER (WHERE set_aside_at IS NULL), count(*) FILTER (WHERE set_aside_at IS NOT NULL),
COALESCE(%s, 0) FROM %s`, oldestAge(t), t),
		}}
	r.freed = sync.NewCond(&r.mu)
	return r
}

// Run relays until ctx ends, then lets the batch in flight finish (within
// PublishTimeout) and returns nil. It wakes when a transaction that wrote
// to the outbox commits (LISTEN/NOTIFY), every PollInterval otherwise, and
// at once after a full batch. A database or broker that is unreachable is
// waited for (the rows stay where they are): while the broker has no
// connection the relay claims no rows, and a batch whose broker connection
// is lost gives its rows back at once, so relays that can publish take
// them. Run returns an error only for a bad schema, an outbox table that
// is missing or of another shape (ErrSchema, at once, naming it: see
// Schema.Check), or a closed broker (mq.ErrClosed). Run it once per Relay.
func (r *Relay) Run(ctx context.Context) error {
	if r.err != nil {
		return r.err
	}
	// A table that is missing or of another shape will not appear by
	// waiting: say so at once. A database that does not answer is waited
	// for, as the loop does.
	if err := r.schema.check(ctx, r.db, true, false); errors.Is(err, ErrSchema) {
		return err
	}
	defer r.closePublishers()
	unreg := r.m.observe()
	defer unreg()

	lctx, stop := context.WithCancel(ctx)
	defer stop()
	wakes := make([]chan struct{}, loops)
	for i := range wakes {
		wakes[i] = make(chan struct{}, 1)
	}
	var wg sync.WaitGroup
	wg.Go(func() { r.listen(lctx, wakes) })
	errs := make([]error, loops)
	for i := range loops {
		wg.Go(func() {
			if errs[i] = r.loop(lctx, wakes[i], i == 0); errs[i] != nil {
				stop()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// loops is how many batches a relay has in flight at once: while one
// waits for its confirms or its commit, the next is claimed and sent.
const loops = 2

// loop claims and publishes batches until ctx ends (nil) or the broker is
// closed (mq.ErrClosed); the first loop also refreshes the gauges.
func (r *Relay) loop(ctx context.Context, wake <-chan struct{}, stats bool) error {
	idle := time.NewTimer(time.Hour)
	defer idle.Stop()
	var lastStats time.Time
	pause := 50 * time.Millisecond
	down := false // the broker is not connected: claim nothing until it is
	// The last batch was full: more rows wait. A relay may start into a
	// backlog (after an outage, a deploy), so its first claim reads the
	// pending index in order too, rather than every pending row (twice
	// at start: once per loop).
	backlog := true
	// The connection whose transaction holds the next batch's rows, claimed
	// with the last batch's commit (see run); given back on every way out.
	held := &heldConn{}
	defer r.letGo(ctx, held)
	for {
		if !r.b.Ready() {
			r.letGo(ctx, held)
			if !down && stats {
				r.log.LogAttrs(ctx, slog.LevelWarn, EventRelayFailed, slog.String("table", r.schema.Outbox), slog.Any("error", errNoBroker))
			}
			down = true
			wctx, cancel := context.WithTimeout(ctx, max(r.c.poll, time.Second))
			err := r.b.WaitReady(wctx)
			cancel()
			switch {
			case ctx.Err() != nil:
				return nil
			case errors.Is(err, mq.ErrClosed):
				return err
			case err != nil:
				if stats && time.Since(lastStats) >= max(r.c.poll, time.Second) {
					r.stats(ctx)
					lastStats = time.Now()
				}
				if errors.Is(err, mq.ErrNotReady) && !sleep(ctx, max(r.c.poll, time.Second)) {
					return nil
				}
				continue
			}
		}
		down = false
		r.busy.Add(1)
		full, err := r.batch(ctx, backlog, held)
		r.busy.Add(-1)
		select {
		case r.idle <- struct{}{}:
		default:
		}
		backlog = full
		if errors.Is(err, mq.ErrClosed) {
			return err
		}
		if stats && time.Since(lastStats) >= max(r.c.poll, time.Second) {
			r.stats(ctx)
			lastStats = time.Now()
		}
		if ctx.Err() != nil {
			return nil
		}
		wait := r.c.poll
		switch {
		case err != nil:
			r.log.LogAttrs(ctx, slog.LevelWarn, EventRelayFailed, slog.String("table", r.schema.Outbox), slog.Any("error", err))
			wait = min(pause, r.c.poll)
			pause = min(pause*2, 5*time.Second)
		case full:
			pause = 50 * time.Millisecond
			continue
		default:
			pause = 50 * time.Millisecond
		}
		idle.Reset(wait) // no stale tick since Go 1.23
		select {
		case <-ctx.Done():
			return nil
		case <-wake:
			idle.Stop()
		case <-idle.C:
		}
	}
}

// errNoBroker: the relay's broker has no connection; it claims no row
// until it has one, so the rows stay free for relays that can publish.
var errNoBroker = errors.New("outbox: the broker is not connected: claiming no rows until it is")

// errBrokerLost: the broker's connection was lost while a batch waited for
// its confirms; the batch gives its rows back at once.
var errBrokerLost = errors.New("outbox: the broker connection was lost during the batch: its rows are left as they were")

// sleep waits d or until ctx ends; false when ctx ended.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// watchBroker cancels a batch's publishes (cancel) as soon as the broker
// has no connection, instead of letting them wait for the next one until
// PublishTimeout: the rows are then given back at once. The channel it
// returns says, once ctx has ended, whether it cancelled.
func (r *Relay) watchBroker(ctx context.Context, cancel context.CancelFunc) <-chan bool {
	lost := make(chan bool, 1)
	go func() {
		t := time.NewTicker(brokerWatch)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				lost <- false
				return
			case <-t.C:
				if !r.b.Ready() {
					cancel()
					lost <- true
					return
				}
			}
		}
	}()
	return lost
}

// brokerWatch is how often a batch in flight looks at its broker's
// connection.
const brokerWatch = 50 * time.Millisecond

// errNoListen: the database's driver is not pgx, so the relay only polls.
var errNoListen = errors.New("outbox: the database driver is not pgx: polling only")

// listen holds a connection of its own that LISTENs and probes, and
// signals wake on every notification, every change the probe sees, and
// once after each LISTEN (for rows written while it had none), until ctx
// ends; a lost connection is replaced with backoff. With a driver other
// than pgx it only probes, through the pool.
func (r *Relay) listen(ctx context.Context, wakes []chan struct{}) {
	pause := 100 * time.Millisecond
	p := r.newProber()
	for ctx.Err() == nil {
		err := r.listenOnce(ctx, wakes, p)
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, errNoListen) {
			r.log.LogAttrs(ctx, slog.LevelInfo, "acemq.outbox.listen.unavailable", slog.String("table", r.schema.Outbox), slog.Any("error", err))
			r.probePool(ctx, wakes, p)
			return
		}
		r.log.LogAttrs(ctx, slog.LevelDebug, "acemq.outbox.listen.lost", slog.String("table", r.schema.Outbox), slog.Any("error", err))
		if !sleep(ctx, pause) {
			return
		}
		pause = min(pause*2, 5*time.Second)
	}
}

func signal(wakes []chan struct{}) {
	for _, w := range wakes {
		select {
		case w <- struct{}{}:
		default:
		}
	}
}

// The probe's waits: probeMin after the table changed, doubling while it
// does not, to at most probeMax (or PollInterval when shorter).
const (
	probeMin = time.Millisecond
	probeMax = 5 * time.Millisecond
)

// prober is the probe's state: the newest pending row id it saw and its
// next wait. The probe reads the table's newest pending row id (the last
// entry of an index, one cheap statement) and wakes the loops when it
// changed: a commit added a row, or a batch deleted some. So a commit is
// found within milliseconds without a NOTIFY in the writer's transaction,
// which would serialise the writers' commits. A row committed out of id
// order behind a newer one is found when the newer one is published, or
// by the loops' own claim every PollInterval.
type prober struct {
	last       int64
	wait, most time.Duration
}

func (r *Relay) newProber() *prober {
	most := min(probeMax, r.c.poll)
	return &prober{last: -1, wait: min(probeMin, most), most: most}
}

// saw records the probe's answer and says whether to wake the loops.
func (p *prober) saw(top int64) bool {
	if top == p.last {
		p.wait = min(p.wait*2, p.most)
		return false
	}
	p.last = top
	p.wait = min(probeMin, p.most)
	return top > 0
}

// rest waits, while every loop is in a batch, until one leaves its batch
// or ctx ends. While all are busy none could answer a wake, and the probe
// would only load the database (a backlog drained at full speed changes
// the table all the time) and this process (a wait of 1 ms, again and
// again, measured at a tenth of the relay's CPU while it drained). A loop
// whose batch was full claims again at once; one whose batch was not
// waits for a wake, and the probe, resumed as soon as that loop is idle,
// compares with what it saw before it rested, so a row committed
// meanwhile still wakes it. It says whether it waited.
func (r *Relay) rest(ctx context.Context) bool {
	if r.busy.Load() < loops {
		return false
	}
	for r.busy.Load() >= loops {
		select {
		case <-ctx.Done():
			return true
		case <-r.idle:
		}
	}
	return true
}

// probePool probes through db's pool, for a driver that cannot LISTEN.
func (r *Relay) probePool(ctx context.Context, wakes []chan struct{}, p *prober) {
	for sleep(ctx, p.wait) {
		if !r.b.Ready() {
			p.wait = p.most // the loops claim nothing until the broker is back
			continue
		}
		if r.rest(ctx) {
			continue
		}
		qctx, cancel := context.WithTimeout(ctx, max(r.c.poll, time.Second))
		var top int64
		err := r.db.QueryRowContext(qctx, r.q.probe).Scan(&top)
		cancel()
		switch {
		case err != nil:
			p.wait = max(p.most, min(r.c.poll, time.Second)) // the loops report the database
		case p.saw(top):
			signal(wakes)
		}
	}
}

func (r *Relay) listenOnce(ctx context.Context, wake []chan struct{}, p *prober) error {
	conn, err := r.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	var failure error
	_ = conn.Raw(func(dc any) error {
		pc, ok := dc.(interface{ Conn() *pgx.Conn })
		if !ok {
			failure = errNoListen
			return nil
		}
		c := pc.Conn()
		if _, err := c.Exec(ctx, "LISTEN "+pgx.Identifier{r.schema.channel()}.Sanitize()); err != nil {
			failure = err
			return driver.ErrBadConn
		}
		// The probe reads the end of the pending index whatever the
		// statistics say (a table analyzed while empty would otherwise be
		// read whole when it holds a backlog). The connection is never
		// given back to the pool, so the setting stays with it.
		if _, err := c.Exec(ctx, "SET enable_seqscan = off; SET enable_bitmapscan = off"); err != nil {
			failure = err
			return driver.ErrBadConn
		}
		signal(wake)
		for {
			wctx, cancel := context.WithTimeout(ctx, p.wait)
			_, err := c.WaitForNotification(wctx)
			cancel()
			switch {
			case err == nil:
				signal(wake)
				continue
			case ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded):
				failure = err
				// Never hand a connection that listens back to the pool.
				return driver.ErrBadConn
			}
			if !r.b.Ready() {
				p.wait = p.most // the loops claim nothing until the broker is back
				continue
			}
			if r.rest(ctx) {
				continue // every loop claims again when its batch ends (see rest)
			}
			var top int64
			if err := c.QueryRow(ctx, r.q.probe).Scan(&top); err != nil {
				failure = err
				return driver.ErrBadConn
			}
			if p.saw(top) {
				signal(wake)
			}
		}
	})
	return failure
}

// row is one claimed outbox row.
type row struct {
	id                      int64
	exchange, key, ordering string
	body, props, trace      []byte
	attempts                int
	err                     error // the publish's outcome
	sent                    bool  // a publish was made (err is its outcome)
}

// batch claims up to BatchSize due rows, publishes those it may (the
// ordering promise), and deletes the confirmed ones and records the
// refused ones in the same transaction. full says a whole batch was
// published, so more may be waiting.
//
// backlog (the loop's last batch was full) has the claim read the pending
// index in id order, and the delete the primary key, whatever the
// planner's statistics say: statistics taken while the table was small
// (the usual case: rows leave as fast as they come) make it read every
// pending row, to sort them for the claim and to find the batch's rows
// for the delete, so each batch of a backlog costs time in proportion to
// the backlog until autovacuum analyzes the table again (measured: a claim
// of 200 among 10 000 rows 125 ms, against 1 ms in index order).
//
// With the pgx driver the batch runs on the pgx connection under db's
// (pgxTx): its begin, settings and claim go in one round trip, and its
// refusals, delete and commit in one more, rather than one each. With any
// other driver it runs in a database/sql transaction (sqlTx), a round
// trip a statement. held is the loop's: a connection kept from its last
// batch, whose transaction holds this batch's rows (claimed with that
// batch's commit, see run), and where batch leaves the next one's.
func (r *Relay) batch(ctx context.Context, backlog bool, held *heldConn) (full bool, err error) {
	bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.c.timeout)
	defer cancel()
	conn, t := held.conn, held.tx
	*held = heldConn{}
	if conn == nil {
		if conn, err = r.db.Conn(bctx); err != nil {
			return false, err
		}
	}
	keep := false
	defer func() {
		if !keep {
			conn.Close()
		}
	}()
	pgxConn := false
	_ = conn.Raw(func(dc any) error {
		pc, ok := dc.(interface{ Conn() *pgx.Conn })
		if !ok {
			return nil
		}
		pgxConn = true
		if t == nil {
			t = &pgxTx{q: &r.q, c: pc.Conn()}
		}
		full, err = r.run(bctx, ctx, t, backlog)
		if len(t.next) > 0 {
			keep = true
			*held = heldConn{conn: conn, tx: t}
			return nil
		}
		return t.end(ctx)
	})
	if pgxConn {
		return full, err
	}
	tx, err := conn.BeginTx(bctx, nil)
	if err != nil {
		return false, err
	}
	defer tx.Rollback() //nolint:errcheck // after Commit it is a no-op
	return r.run(bctx, ctx, &sqlTx{q: &r.q, tx: tx}, backlog)
}

// heldConn is a connection a loop keeps between two batches: its
// transaction holds the rows of the next batch, claimed in the same round
// trip as the last one's commit.
type heldConn struct {
	conn *sql.Conn
	tx   *pgxTx
}

// letGo gives back the rows and the connection held, if any: the
// transaction is rolled back (the rows are free again at once), and the
// connection goes back to the pool (or is closed, when it cannot be).
func (r *Relay) letGo(ctx context.Context, held *heldConn) {
	if held.conn == nil {
		return
	}
	_ = held.conn.Raw(func(any) error { return held.tx.end(ctx) })
	held.conn.Close()
	*held = heldConn{}
}

// run is batch in the transaction t, within ctx; live is the relay's own
// context: a full batch, while live has not ended and the broker is
// connected, has the next batch's rows claimed with its commit (on pgx: in
// the same round trip; see pgxTx.finish).
func (r *Relay) run(ctx, live context.Context, t batchTx, backlog bool) (full bool, err error) {
	// The claim bounds its transaction on the server too: a relay that
	// freezes (SIGSTOP, a paused container, a partition) while it holds
	// claimed rows has its session ended after PublishTimeout
	// (idle_in_transaction_session_timeout, statement_timeout), and the
	// rows go to another relay; no live batch is idle that long, its
	// context has ended by then. The batch's commit does not wait for the
	// disk (synchronous_commit off): deletes lost in a database crash only
	// publish their rows again, which at-least-once allows.
	ms := strconv.FormatInt(max(r.c.timeout.Milliseconds(), 1), 10)
	rows, err := t.claim(ctx, backlog, r.c.batch, ms)
	if err != nil {
		return false, fmt.Errorf("outbox: claim rows: %w", err)
	}
	if len(rows) == 0 {
		return false, nil
	}
	send, err := r.unblocked(ctx, t, rows)
	if err != nil {
		return false, err
	}
	// The publishes get nine tenths of the batch's time, so the deletes and
	// the commit of what was confirmed still fit in it.
	pctx, pcancel := context.WithTimeout(ctx, r.c.timeout*9/10)
	watch := r.watchBroker(pctx, pcancel)
	r.publish(pctx, send)
	pcancel()
	lost := <-watch

	var done []int64
	var transient error
	var refusals []refusal // logged once their transaction has committed
	for _, rw := range send {
		switch {
		case !rw.sent:
		case rw.err == nil:
			done = append(done, rw.id)
		case isTransient(rw.err):
			transient = rw.err
		default:
			refusals = append(refusals, r.refused(rw))
		}
	}
	full = len(rows) == r.c.batch && len(done) == len(rows)
	next := full && !lost && transient == nil && live.Err() == nil && r.b.Ready()
	if err := t.finish(ctx, refusals, done, next); err != nil {
		var ce commitError
		if errors.As(err, &ce) && len(refusals) > 0 {
			return false, fmt.Errorf("%w (the %d rows the broker refused in this batch stay as they were: neither their attempt nor a set-aside was recorded)", err, len(refusals))
		}
		return false, err
	}
	for _, f := range refusals {
		r.logRefusal(ctx, f)
	}
	r.fails.note(len(done), refusals)
	r.m.published(ctx, len(done))
	if lost {
		return false, errBrokerLost
	}
	if transient != nil {
		return false, transient
	}
	return full, nil
}

// keyed is a pending row of an ordering key, as unblocked reads them.
type keyed struct {
	id  int64
	key string
}

// unblocked is rows without those an earlier row of their ordering key
// holds up: one this relay did not claim (another relay's, one waiting for
// its retry, one written but not yet committed when it was claimed is not
// seen, see the package doc) comes first.
func (r *Relay) unblocked(ctx context.Context, t batchTx, rows []*row) ([]*row, error) {
	maxID := map[string]int64{}
	for _, rw := range rows {
		if rw.ordering != "" {
			maxID[rw.ordering] = max(maxID[rw.ordering], rw.id)
		}
	}
	if len(maxID) == 0 {
		return rows, nil
	}
	found, err := t.blockers(ctx, keysArg(maxID))
	if err != nil {
		return nil, fmt.Errorf("outbox: read ordering keys: %w", err)
	}
	mine := make(map[int64]bool, len(rows))
	for _, rw := range rows {
		mine[rw.id] = true
	}
	// In id order, sorted here rather than by the statement, which may run
	// with sorting off (see batch).
	slices.SortFunc(found, func(a, b keyed) int { return cmp.Compare(a.id, b.id) })
	blocked := map[string]bool{}
	ok := map[int64]bool{}
	for _, k := range found {
		if blocked[k.key] {
			continue
		}
		if !mine[k.id] {
			blocked[k.key] = true
			continue
		}
		ok[k.id] = true
	}
	out := rows[:0:0]
	for _, rw := range rows {
		if rw.ordering == "" || ok[rw.id] {
			out = append(out, rw)
		}
	}
	return out, nil
}

// publish sends rows: those without an ordering key all at once, those of
// one key one after the other, each waiting for the one before's confirm
// and stopping at the first that fails. Rows without an ordering key or a
// writer's trace go out in one PublishBatch per exchange and routing key
// (one hand-over to the channel's writer for the run, and one goroutine
// rather than one per row: measured, a third of the relay's CPU per
// message); a row with a trace is published alone, in its writer's trace.
func (r *Relay) publish(ctx context.Context, rows []*row) {
	var wg sync.WaitGroup
	seqs := map[string][]*row{}
	type dest struct{ exchange, key string }
	runs := map[dest][]*row{}
	var order []dest
	for _, rw := range rows {
		switch {
		case rw.ordering != "":
			seqs[rw.ordering] = append(seqs[rw.ordering], rw)
		case len(rw.trace) > 0:
			wg.Go(func() { r.send(ctx, rw) })
		default:
			d := dest{rw.exchange, rw.key}
			if runs[d] == nil {
				order = append(order, d)
			}
			runs[d] = append(runs[d], rw)
		}
	}
	for _, d := range order {
		run := runs[d]
		if len(run) == 1 {
			wg.Go(func() { r.send(ctx, run[0]) })
			continue
		}
		wg.Go(func() { r.sendRun(ctx, d.exchange, d.key, run) })
	}
	for _, seq := range seqs {
		wg.Go(func() {
			for _, rw := range seq {
				if r.send(ctx, rw); rw.err != nil {
					return
				}
			}
		})
	}
	wg.Wait()
}

// send publishes one row, in the trace its writer was in.
func (r *Relay) send(ctx context.Context, rw *row) {
	rw.sent = true
	m, err := decodeProps(rw.props)
	if err != nil {
		rw.err = fmt.Errorf("%w: %w", mq.ErrInvalid, err)
		return
	}
	m.Body = rw.body
	if len(rw.trace) > 0 {
		var carrier propagation.MapCarrier
		if json.Unmarshal(rw.trace, &carrier) == nil {
			ctx = r.c.prop.Extract(ctx, carrier)
			if m.Headers == nil {
				m.Headers = map[string]any{}
			}
			// Without tracing on the broker, the message still carries its
			// writer's context; with it, otelmq writes its publish span's.
			hc := otelmq.HeaderCarrier(m.Headers)
			missing := false
			for _, f := range r.c.prop.Fields() {
				if hc.Get(f) == "" && carrier.Get(f) != "" {
					missing = true
				}
			}
			if missing {
				r.c.prop.Inject(ctx, hc)
			}
		}
	}
	e := r.publisher(rw.exchange)
	rw.err = e.p.Publish(ctx, rw.key, m)
	r.release(e)
}

// sendRun publishes rows without a trace, all to exchange with key, in
// one PublishBatch; each row gets its own outcome.
func (r *Relay) sendRun(ctx context.Context, exchange, key string, rows []*row) {
	msgs := make([]mq.Message, 0, len(rows))
	sent := make([]*row, 0, len(rows))
	for _, rw := range rows {
		rw.sent = true
		m, err := decodeProps(rw.props)
		if err != nil {
			rw.err = fmt.Errorf("%w: %w", mq.ErrInvalid, err)
			continue
		}
		m.Body = rw.body
		msgs = append(msgs, m)
		sent = append(sent, rw)
	}
	if len(msgs) == 0 {
		return
	}
	e := r.publisher(exchange)
	err := e.p.PublishBatch(ctx, key, msgs)
	r.release(e)
	var be *mq.BatchError
	switch {
	case err == nil:
	case errors.As(err, &be) && len(be.Errs) == len(sent):
		for i, rw := range sent {
			rw.err = be.Errs[i]
		}
	default: // not a batch's answer: every row shares it
		for _, rw := range sent {
			rw.err = err
		}
	}
}

// maxPublishers bounds the publishers, so the channels, a relay holds at
// once: a relay of rows to thousands of exchanges (one per tenant, say)
// would otherwise take one channel per exchange it ever published to, up
// to the connection's channel_max (2047 on RabbitMQ), and leave none for
// the broker's other users. Past the bound, the least recently used idle
// publisher is closed; a send finding every one busy waits for one.
const maxPublishers = 64

// pubEntry is one publisher of the relay and how many sends use it now.
type pubEntry struct {
	p    *mq.Publisher
	used int    // sends publishing through it now
	last uint64 // when it was last taken (r.tick)
}

// publisher returns exchange's publisher, opening it (and closing an
// idle one past maxPublishers) when needed; give it back with release.
func (r *Relay) publisher(exchange string) *pubEntry {
	r.mu.Lock()
	for {
		r.tick++
		if e := r.pubs[exchange]; e != nil {
			e.used++
			e.last = r.tick
			r.mu.Unlock()
			return e
		}
		if len(r.pubs)+r.closing < maxPublishers {
			// AsPublisher's rule: an event (to a topic, fanout or headers
			// exchange of the app's topology) is not mandatory.
			e := &pubEntry{p: r.b.Publisher(exchange, fxmodule.PublisherOptions(r.c.topo, exchange, r.c.pubOpts...)...), used: 1, last: r.tick}
			r.pubs[exchange] = e
			r.mu.Unlock()
			return e
		}
		var oldest string
		for ex, e := range r.pubs {
			if e.used == 0 && (oldest == "" || e.last < r.pubs[oldest].last) {
				oldest = ex
			}
		}
		if oldest == "" {
			r.freed.Wait() // every publisher is busy: wait for a release
			continue
		}
		old := r.pubs[oldest]
		delete(r.pubs, oldest)
		r.closing++
		r.mu.Unlock()
		old.p.Close()
		r.mu.Lock()
		r.closing--
	}
}

// release gives back a publisher taken with publisher.
func (r *Relay) release(e *pubEntry) {
	r.mu.Lock()
	e.used--
	r.mu.Unlock()
	r.freed.Broadcast()
}

func (r *Relay) closePublishers() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for ex, e := range r.pubs {
		e.p.Close()
		delete(r.pubs, ex)
	}
}

// isTransient: the publish did not get an answer about the row itself (the
// batch ran out of time, the broker closed); the row is left as it was.
func isTransient(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) || errors.Is(err, mq.ErrClosed)
}

// cannotCarry: the broker will refuse this message on every attempt, so
// trying again only delays it being set aside: input the wire cannot carry
// (mq.ErrInvalid, refused before sending), or a publish the broker refused
// with 406 PRECONDITION_FAILED, which it answers for the message itself (a
// body over its max_message_size, a user-id that is not the connection's
// user, an expiration it cannot read).
func cannotCarry(err error) bool {
	return errors.Is(err, mq.ErrInvalid) || errors.Is(err, mq.ErrPreconditionFailed)
}

// refusal is a refused row as its batch records it, logged and counted
// once the batch's transaction has committed (logRefusal): a row logged as
// set aside is set aside for whoever reads the table next.
type refusal struct {
	rw       *row
	attempts int
	aside    bool
	wait     time.Duration
}

// refused is how the batch records a row the broker refused: one more
// attempt, the error, when to try again, and past MaxAttempts (or for a
// message the wire cannot carry) set aside.
func (r *Relay) refused(rw *row) refusal {
	f := refusal{rw: rw, attempts: rw.attempts + 1}
	f.aside = f.attempts >= r.c.maxAttempts || cannotCarry(rw.err)
	f.wait = retryWait(f.attempts)
	return f
}

// args is the arguments of the statement that records f (relayQueries.fail).
func (f refusal) args() []any {
	msg := f.rw.err.Error()
	if len(msg) > 4096 {
		msg = msg[:4096]
	}
	return []any{f.rw.id, msg, f.wait.Seconds(), f.aside}
}

// logRefusal logs and counts a refusal whose transaction has committed.
func (r *Relay) logRefusal(ctx context.Context, f refusal) {
	rw := f.rw
	attrs := []slog.Attr{slog.String("table", r.schema.Outbox), slog.Int64("row", rw.id), slog.String("exchange", rw.exchange),
		slog.String("routing_key", rw.key), slog.Int("attempts", f.attempts), slog.Any("error", rw.err)}
	if f.aside {
		r.log.LogAttrs(ctx, slog.LevelError, EventSetAside, attrs...)
		r.m.outcome(ctx, outcomeSetAside)
		return
	}
	r.log.LogAttrs(ctx, slog.LevelWarn, EventPublishFailed, append(attrs, slog.Duration("retry_in", f.wait))...)
	r.m.outcome(ctx, outcomeRetry)
}

// retryWait is the wait before a refused row's next attempt: 1 s after the
// first, doubling, at most 10 min.
func retryWait(attempts int) time.Duration {
	if attempts > 10 {
		return 10 * time.Minute
	}
	return min(time.Second<<(attempts-1), 10*time.Minute)
}

// stats refreshes what the depth and age gauges report.
func (r *Relay) stats(ctx context.Context) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	var pending, aside int64
	var age float64
	if err := r.db.QueryRowContext(sctx, r.q.stats).Scan(&pending, &aside, &age); err != nil {
		return // the gauges keep their last values; the batch reports the database
	}
	r.m.set(pending, aside, age)
}
