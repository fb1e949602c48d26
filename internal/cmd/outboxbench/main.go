package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/mqtest"
	"github.com/acemq/acemq-go/outbox"
	"github.com/acemq/acemq-go/topology"
)

var (
	amqpURL = flag.String("url", envOr("AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/"), "broker URL")
	pgURL   = flag.String("pg", envOr("PG_URL", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"), "PostgreSQL URL")
	rounds  = flag.Int("rounds", 5, "rounds per measure (the median is reported)")
	txN     = flag.Int("tx", 1000, "transactions per tx-cost round")
	relayN  = flag.Int("relay", 10000, "messages per throughput round")
	batch   = flag.Int("batch", 200, "the relay's batch, and the direct publisher's goroutines")
	latN    = flag.Int("latency", 200, "commits measured for latency")
	inboxN  = flag.Int("inbox", 2000, "deliveries per inbox round")
	only    = flag.String("only", "", "run only the measures whose name starts with this: tx, throughput, inbox, latency")
	profile = flag.String("cpuprofile", "", "write a CPU profile of the run to this file")
)

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func main() {
	flag.Parse()
	if *profile != "" {
		f, err := os.Create(*profile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "outboxbench:", err)
			os.Exit(1)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, "outboxbench:", err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	if err := run(ctx); err != nil {
		pprof.StopCPUProfile()
		fmt.Fprintln(os.Stderr, "outboxbench:", err)
		os.Exit(1) //nolint:gocritic // the profile is stopped above
	}
}

type rig struct {
	db      *sql.DB
	b       *mq.Broker
	s       outbox.Schema
	plain   string // the plain table of the tx baseline
	orders  string
	queue   string
	cleanup []func()

	// The OUTBOX line: 8 writers (default) / plain, relay / Publisher,
	// commit-to-delivery p50 in ms; negative when not measured.
	writers8, relay, p50 float64
}

func run(ctx context.Context) error {
	r := &rig{writers8: -1, relay: -1, p50: -1}
	defer func() {
		for i := len(r.cleanup) - 1; i >= 0; i-- {
			r.cleanup[i]()
		}
	}()
	db, err := sql.Open("pgx", *pgURL)
	if err != nil {
		return err
	}
	// Idle connections are kept, so that no PostgreSQL backend ends
	// (taking its CPU time out of procCPU's sum) between two readings.
	db.SetMaxIdleConns(16)
	r.db = db
	r.cleanup = append(r.cleanup, func() { _ = db.Close() })
	if err := db.PingContext(ctx); err != nil {
		return fmt.Errorf("PostgreSQL at %s: %w", *pgURL, err)
	}
	var raw [4]byte
	_, _ = rand.Read(raw[:])
	id := hex.EncodeToString(raw[:])
	r.s = outbox.Schema{Outbox: "goit_bench_outbox_" + id, Inbox: "goit_bench_inbox_" + id}
	r.plain, r.orders = "goit_bench_plain_"+id, "goit_bench_orders_"+id
	if err := r.s.Create(ctx, db); err != nil {
		return err
	}
	if _, err := db.ExecContext(ctx, fmt.Sprintf(`CREATE TABLE %s (id text PRIMARY KEY, total int NOT NULL);
CREATE TABLE %s (id bigserial PRIMARY KEY, exchange text NOT NULL, routing_key text NOT NULL, message_id text NOT NULL, body bytea NOT NULL, properties jsonb NOT NULL)`,
		r.orders, r.plain)); err != nil {
		return err
	}
	r.cleanup = append(r.cleanup, func() {
		_, _ = db.Exec("DROP TABLE IF EXISTS " + r.s.Outbox + ", " + r.s.Inbox + ", " + r.plain + ", " + r.orders)
	})

	r.b = mq.New(mq.Config{URLs: []string{*amqpURL}, Logger: quiet})
	if err := r.b.Start(ctx); err != nil {
		return err
	}
	r.cleanup = append(r.cleanup, func() {
		cctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = r.b.Close(cctx)
	})
	r.queue = "goit.outboxbench." + id
	if err := r.b.Declare(ctx, topology.New().Queue(r.queue, topology.Classic())); err != nil {
		return err
	}
	r.cleanup = append(r.cleanup, func() {
		cctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_, _ = r.b.DeleteQueue(cctx, r.queue)
	})

	fmt.Printf("outbox and inbox, PostgreSQL %s, broker %s, %d rounds (median)\n\n", mq.Redact(*pgURL), mq.Redact(*amqpURL), *rounds)
	fmt.Printf("%-44s %14s %14s %8s %s\n", "measure", "outbox/inbox", "baseline", "ratio", "target")
	for _, m := range []struct {
		name string
		run  func(context.Context) error
	}{{"tx", r.txCost}, {"throughput", r.throughput}, {"inbox", r.inbox}, {"latency", r.latency}} {
		if !strings.HasPrefix(m.name, *only) {
			continue
		}
		if err := m.run(ctx); err != nil {
			return fmt.Errorf("%s: %w", m.name, err)
		}
	}
	if r.writers8 >= 0 && r.relay >= 0 && r.p50 >= 0 {
		fmt.Printf("\nOUTBOX writers8=%.2f relay=%.2f p50_ms=%.2f\n", r.writers8, r.relay, r.p50)
	}
	return nil
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

func body(i int) []byte {
	return fmt.Appendf(nil, `{"order":"o-%d","total":%d,"lines":[{"sku":"a","n":1}]}`, i, i)
}

// txCost: µs per transaction, order + outbox publish against order + a
// plain insert of the same row; then transactions per second with
// concurrent writers, with and without the outbox's NOTIFY.
func (r *rig) txCost(ctx context.Context) error {
	notifying := outbox.New(outbox.WithSchema(r.s), outbox.WithNotify())
	quiet := outbox.New(outbox.WithSchema(r.s)) // the default: no NOTIFY
	plainQ := fmt.Sprintf(`INSERT INTO %s (exchange, routing_key, message_id, body, properties) VALUES ($1, $2, $3, $4, $5)`, r.plain)
	orderQ := fmt.Sprintf(`INSERT INTO %s (id, total) VALUES ($1, $2)`, r.orders)
	props := []byte(`{"content_type":"application/json","delivery_mode":2,"message_id":"x","type":"order.placed"}`)
	var next atomic.Int64
	var stmt [2]atomic.Int64 // ns in the statement alone: [plain insert, outbox publish]
	// one is a transaction writing an order and its event through ob, or
	// with a plain insert when ob is nil.
	one := func(ob *outbox.Outbox) error {
		n := int(next.Add(1))
		tx, err := r.db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback() //nolint:errcheck
		oid := fmt.Sprintf("o-%d", n)
		if _, err := tx.ExecContext(ctx, orderQ, oid, n); err != nil {
			return err
		}
		start := time.Now()
		if ob != nil {
			err = ob.Publish(ctx, tx, "orders-events", "order.placed", mq.Message{Body: body(n), ContentType: "application/json", Type: "order.placed", MessageId: oid})
			stmt[1].Add(int64(time.Since(start)))
		} else {
			_, err = tx.ExecContext(ctx, plainQ, "orders-events", "order.placed", oid, body(n), props)
			stmt[0].Add(int64(time.Since(start)))
		}
		if err != nil {
			return err
		}
		return tx.Commit()
	}
	truncate := func() error {
		_, err := r.db.ExecContext(ctx, "TRUNCATE "+r.s.Outbox+", "+r.plain)
		return err
	}

	// Each pair of transactions is one of each, taking turns to go first,
	// so the machine's load (fsync at commit, other users) falls on both.
	var with, without []float64
	for range *rounds {
		var dw, do time.Duration
		for i := range *txN {
			for _, ob := range [][]*outbox.Outbox{{nil, quiet}, {quiet, nil}}[i%2] {
				start := time.Now()
				if err := one(ob); err != nil {
					return err
				}
				if ob != nil {
					dw += time.Since(start)
				} else {
					do += time.Since(start)
				}
			}
		}
		with = append(with, float64(dw.Microseconds())/float64(*txN))
		without = append(without, float64(do.Microseconds())/float64(*txN))
		if err := truncate(); err != nil {
			return err
		}
	}
	mw, mo := median(with), median(without)
	fmt.Printf("%-44s %11.0f µs %11.0f µs %7.2fx %s\n", "tx: order + event (outbox vs plain insert)", mw, mo, mw/mo, fmt.Sprintf("(+%.0f µs per publish)", mw-mo))
	total := float64(*rounds * *txN)
	sw, so := float64(stmt[1].Load())/1000/total, float64(stmt[0].Load())/1000/total
	fmt.Printf("%-44s %11.0f µs %11.0f µs %7.2fx\n", "  the statement alone (mean)", sw, so, sw/so)

	// Concurrent writers: every notifying transaction takes PostgreSQL's
	// notification lock at commit and holds it until the commit is on disk.
	// A round of the writers is short (a second or less) and this
	// machine's load swings within seconds, so a single round's ratio
	// ranges widely (measured: 0.6 – 1.4 for the default against the
	// plain insert): they run twice as many rounds as the other measures,
	// and each ratio is the median of the rounds' own ratios (each round's
	// pair measured one right after the other), not a ratio of medians
	// taken from different rounds.
	const writers = 8
	rates := map[*outbox.Outbox][]float64{}
	for k := range 2 * *rounds {
		// The default and the plain insert, the pair the target compares,
		// run one after the other and take turns to go first; the
		// notifying writers run last, so that neither of the pair follows
		// them (rotating all three, the default followed the notifying
		// writers in two rounds of three and the plain insert in none,
		// and its rate was measured lower after them).
		order := []*outbox.Outbox{nil, quiet, notifying}
		if k%2 == 1 {
			order[0], order[1] = order[1], order[0]
		}
		for _, ob := range order {
			start := time.Now()
			var wg sync.WaitGroup
			var failed atomic.Value
			for range writers {
				wg.Go(func() {
					for range *txN / writers {
						if err := one(ob); err != nil {
							failed.Store(err)
							return
						}
					}
				})
			}
			wg.Wait()
			if err, _ := failed.Load().(error); err != nil {
				return err
			}
			rates[ob] = append(rates[ob], float64(*txN/writers*writers)/time.Since(start).Seconds())
		}
		if err := truncate(); err != nil {
			return err
		}
	}
	ratio := func(ob *outbox.Outbox) float64 { return median(perRound(rates[ob], rates[nil])) }
	rp, rn, rq := median(rates[nil]), median(rates[notifying]), median(rates[quiet])
	fmt.Printf("%-44s %10.0f tx/s %10.0f tx/s %7.2fx\n", fmt.Sprintf("tx: %d concurrent writers, WithNotify", writers), rn, rp, ratio(notifying))
	fmt.Printf("%-44s %10.0f tx/s %10.0f tx/s %7.2fx %s\n", fmt.Sprintf("tx: %d concurrent writers, default", writers), rq, rp, ratio(quiet), "≥ 0.90x")
	r.writers8 = ratio(quiet)
	return nil
}

// throughput: msgs/s of one relay draining committed rows against a
// Publisher shared by -batch goroutines.
func (r *rig) throughput(ctx context.Context) error {
	ob := outbox.New(outbox.WithSchema(r.s))
	fill := func(n int) error {
		const per = 500
		for done := 0; done < n; done += per {
			tx, err := r.db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			for i := done; i < min(done+per, n); i++ {
				if err := ob.Publish(ctx, tx, "", r.queue, mq.Message{Body: body(i), ContentType: "application/json"}); err != nil {
					_ = tx.Rollback()
					return err
				}
			}
			if err := tx.Commit(); err != nil {
				return err
			}
		}
		return nil
	}
	purge := func() error {
		_, err := r.b.DeleteQueue(ctx, r.queue)
		if err != nil {
			return err
		}
		return r.b.Declare(ctx, topology.New().Queue(r.queue, topology.Classic()))
	}
	// A side's rate, and its CPU per message for this process, the broker
	// and PostgreSQL (on this machine the three share two cores, so what
	// one side costs the others slows it); record false for the warm-up.
	type sideCPU struct{ own, broker, pg []float64 }
	var relayRates, directRates []float64
	var relayCPU, directCPU sideCPU
	type reading struct{ own, broker, pg time.Duration }
	read := func() reading {
		by := procCPU("beam.smp", "postgres")
		return reading{cpuTime(), by["beam.smp"], by["postgres"]}
	}
	note := func(rates *[]float64, cpus *sideCPU, n int, took time.Duration, from reading) {
		to := read()
		per := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(n) }
		*rates = append(*rates, float64(n)/took.Seconds())
		cpus.own = append(cpus.own, per(to.own-from.own))
		cpus.broker = append(cpus.broker, per(to.broker-from.broker))
		cpus.pg = append(cpus.pg, per(to.pg-from.pg))
	}
	direct := func(n int, record bool) error {
		pub := r.b.Publisher("")
		cpu0 := read()
		start := time.Now()
		var wg sync.WaitGroup
		errs := make(chan error, *batch)
		for w := range *batch {
			wg.Go(func() {
				for i := w; i < n; i += *batch {
					if err := pub.Publish(ctx, r.queue, mq.Message{Body: body(i), ContentType: "application/json"}); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		if record {
			note(&directRates, &directCPU, n, time.Since(start), cpu0)
		}
		pub.Close()
		select {
		case err := <-errs:
			return err
		default:
		}
		return purge()
	}
	relayed := func(n int, record bool) error {
		rctx, stop := context.WithCancel(ctx)
		defer stop()
		// Done is told by the relay's own counter as it counts (after the
		// commit that deletes the rows), as the direct side's end is its
		// last confirm: exact, and it costs the relay nothing. Reading
		// the counter through a reader every few milliseconds instead
		// cost this process CPU (the collection, and the relay's gauge
		// callback it runs) on the relay's side only.
		count := &publishedCount{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader())),
			want: int64(n), done: make(chan struct{})}
		relay := outbox.NewRelay(r.db, r.b, outbox.WithSchema(r.s), outbox.BatchSize(*batch), outbox.WithMeterProvider(count))
		cpu0 := read()
		start := time.Now()
		done := make(chan error, 1)
		go func() { done <- relay.Run(rctx) }()
		select {
		case <-count.done:
		case err := <-done:
			return fmt.Errorf("the relay stopped with %d of %d published: %v", count.n.Load(), n, err)
		}
		if record {
			note(&relayRates, &relayCPU, n, time.Since(start), cpu0)
		}
		stop()
		if err := <-done; err != nil {
			return err
		}
		return purge()
	}
	// A warm-up round of each side, a fifth of a round, not counted:
	// the first publishes of a run (the broker's queue process, this
	// process's heap, PostgreSQL's caches) fall on neither side's rounds.
	warm := max(*relayN/5, 1)
	if err := fill(warm); err != nil {
		return err
	}
	if err := direct(warm, false); err != nil {
		return err
	}
	if err := relayed(warm, false); err != nil {
		return err
	}
	for k := range *rounds {
		// The rows are written before either side runs, and the sides take
		// turns to go first, so what the writes leave the database to do
		// (flushing, autovacuum) falls on both.
		if err := fill(*relayN); err != nil {
			return err
		}
		sides := []func(int, bool) error{direct, relayed}
		if k%2 == 1 {
			sides[0], sides[1] = sides[1], sides[0]
		}
		for _, side := range sides {
			if err := side(*relayN, true); err != nil {
				return err
			}
		}
	}
	// The ratio is the median of each round's own (relay against the
	// direct side of the same round), as for the writers: the broker's rate
	// drifts between rounds by a factor of up to four on this machine, and a
	// ratio of two medians taken from different rounds carries that drift.
	per := perRound(relayRates, directRates)
	mr, md := median(relayRates), median(directRates)
	fmt.Printf("%-44s %10.0f m/s %10.0f m/s %7.2fx %s\n", fmt.Sprintf("throughput: relay vs Publisher (%d at once)", *batch), mr, md, median(per), "≥ 0.90x")
	fmt.Printf("%-44s %s\n", "  each round's ratio", fmtRatios(per))
	for _, c := range []struct {
		what          string
		relay, direct []float64
	}{
		{"  CPU per message: this process", relayCPU.own, directCPU.own},
		{"  CPU per message: the broker (beam.smp)", relayCPU.broker, directCPU.broker},
		{"  CPU per message: PostgreSQL", relayCPU.pg, directCPU.pg},
	} {
		fmt.Printf("%-44s %11.1f µs %11.1f µs\n", c.what, median(c.relay), median(c.direct))
	}
	r.relay = median(per)
	return nil
}

// procCPU is the CPU (user and system) that the processes of this
// machine named each of names have used so far, by name, from one pass
// over /proc: the broker's (beam.smp) and PostgreSQL's (postgres, each
// backend a process). A process that ends between two readings takes its
// time with it, so the sides are measured over runs that open no backend
// and end none.
func procCPU(names ...string) map[string]time.Duration {
	ticks := map[string]int64{}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	for _, e := range ents {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ... utime stime: fields 14 and 15, counted
		// after the comm's closing parenthesis (a comm may hold spaces).
		open, shut := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
		if open < 0 || shut < open {
			continue
		}
		name := string(b[open+1 : shut])
		if !slices.Contains(names, name) {
			continue
		}
		f := strings.Fields(string(b[shut+1:]))
		if len(f) < 13 {
			continue
		}
		u, _ := strconv.ParseInt(f[11], 10, 64)
		s, _ := strconv.ParseInt(f[12], 10, 64)
		ticks[name] += u + s
	}
	out := make(map[string]time.Duration, len(ticks))
	for name, t := range ticks {
		out[name] = time.Duration(t) * (time.Second / 100) // USER_HZ, 100 on Linux
	}
	return out
}

// cpuTime is the CPU this process used so far, user and system.
func cpuTime() time.Duration {
	var u syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &u) != nil {
		return 0
	}
	return time.Duration(u.Utime.Nano() + u.Stime.Nano())
}

// publishedCount is the relay's meter provider (an SDK one, so the
// relay's instruments cost what they cost in a service): it closes done
// once the relay's MetricPublishes has counted want published messages.
type publishedCount struct {
	metric.MeterProvider
	want int64
	n    atomic.Int64
	once sync.Once
	done chan struct{}
}

func (p *publishedCount) Meter(name string, opts ...metric.MeterOption) metric.Meter {
	return countingMeter{Meter: p.MeterProvider.Meter(name, opts...), p: p}
}

type countingMeter struct {
	metric.Meter
	p *publishedCount
}

func (m countingMeter) Int64Counter(name string, opts ...metric.Int64CounterOption) (metric.Int64Counter, error) {
	c, err := m.Meter.Int64Counter(name, opts...)
	if err != nil || name != outbox.MetricPublishes {
		return c, err
	}
	return countingCounter{Int64Counter: c, p: m.p}, nil
}

type countingCounter struct {
	metric.Int64Counter
	p *publishedCount
}

func (c countingCounter) Add(ctx context.Context, n int64, opts ...metric.AddOption) {
	c.Int64Counter.Add(ctx, n, opts...)
	attrs := metric.NewAddConfig(opts).Attributes()
	if v, _ := attrs.Value(outbox.OutcomeKey); v.AsString() != "published" {
		return
	}
	if c.p.n.Add(n) >= c.p.want {
		c.p.once.Do(func() { close(c.p.done) })
	}
}

// inbox: µs per delivery through the Inbox against the bare handler
// (which does nothing, so the baseline is the call itself).
func (r *rig) inbox(ctx context.Context) error {
	bare := mq.HandlerFunc(func(context.Context, *mq.Delivery) error { return nil })
	in := outbox.Inbox(r.db, outbox.WithSchema(r.s))(bare)
	var with, without []float64
	for round := range *rounds {
		for k, h := range []mq.Handler{bare, in} {
			start := time.Now()
			for i := range *inboxN {
				d := mqtest.NewDelivery("goit.bench", amqp.Delivery{MessageId: fmt.Sprintf("r%d-%d", round, i)}, mqtest.Logger(quiet))
				if err := h.Handle(ctx, d); err != nil {
					return err
				}
			}
			ns := float64(time.Since(start).Nanoseconds()) / float64(*inboxN)
			if k == 0 {
				without = append(without, ns)
			} else {
				with = append(with, ns)
			}
		}
	}
	mw, mo := median(with), median(without)
	fmt.Printf("%-44s %11.0f µs %11.3f µs %8s %s\n", "inbox: per delivery (begin, record, commit)", mw/1000, mo/1000, "", fmt.Sprintf("(+%.0f µs per message)", (mw-mo)/1000))
	return nil
}

// latency: commit to delivery with the relay idle, in the default
// configuration (no NOTIFY: the relay's probe finds the row).
func (r *rig) latency(ctx context.Context) error {
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	relay := outbox.NewRelay(r.db, r.b, outbox.WithSchema(r.s))
	done := make(chan error, 1)
	go func() { done <- relay.Run(rctx) }()
	got := make(chan time.Time, 1)
	c, err := r.b.Consume(ctx, r.queue, mq.HandlerFunc(func(context.Context, *mq.Delivery) error { got <- time.Now(); return nil }))
	if err != nil {
		return err
	}
	defer c.Stop(context.WithoutCancel(ctx)) //nolint:errcheck
	time.Sleep(300 * time.Millisecond)
	ob := outbox.New(outbox.WithSchema(r.s))
	var lat []float64
	for i := range *latN {
		tx, err := r.db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if err := ob.Publish(ctx, tx, "", r.queue, mq.Message{Body: body(i)}); err != nil {
			_ = tx.Rollback()
			return err
		}
		if err := tx.Commit(); err != nil {
			return err
		}
		committed := time.Now()
		select {
		case at := <-got:
			lat = append(lat, float64(at.Sub(committed).Microseconds())/1000)
		case <-time.After(10 * time.Second):
			return fmt.Errorf("commit %d not delivered within 10 s", i)
		}
		time.Sleep(time.Duration(10+i%5*10) * time.Millisecond) // the relay idle again, its probe at any point of its backoff
	}
	stop()
	if err := <-done; err != nil {
		return err
	}
	slices.Sort(lat)
	p := func(q float64) float64 { return lat[min(len(lat)-1, int(q*float64(len(lat))))] }
	fmt.Printf("%-44s %11.2f ms %14s %8s %s\n", "commit to delivery p50 (default)", p(0.5), "", "", "< 10 ms")
	fmt.Printf("%-44s %11.2f ms %14s %8s\n", "commit to delivery p99 (default)", p(0.99), "", "")
	r.p50 = p(0.5)
	return nil
}

// perRound is each round's own ratio: num[k] against den[k], the two
// sides of round k measured one right after the other.
func perRound(num, den []float64) []float64 {
	per := make([]float64, len(num))
	for k := range num {
		per[k] = num[k] / den[k]
	}
	return per
}

// fmtRatios is ratios as a list, two decimals each.
func fmtRatios(ratios []float64) string {
	parts := make([]string, len(ratios))
	for i, v := range ratios {
		parts[i] = fmt.Sprintf("%.2f", v)
	}
	return strings.Join(parts, " ")
}
