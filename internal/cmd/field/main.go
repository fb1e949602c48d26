package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/acemq/acemq-go/internal/field/check"
	"github.com/acemq/acemq-go/internal/field/fault"
	"github.com/acemq/acemq-go/internal/field/history"
	"github.com/acemq/acemq-go/internal/field/workload"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/ops"
	amqp "github.com/rabbitmq/amqp091-go"
)

type options struct {
	seed     int64
	duration time.Duration
	version  int // fault.Generate's (-mode field); 0 in -mode cluster
	mode     string
	script   string
	out      string
	bound    time.Duration
	settle   time.Duration
	rate     float64
	soak     string
	sample   time.Duration
}

func main() {
	var o options
	seed := os.Getenv("SEED")
	dur := os.Getenv("DURATION")
	version := os.Getenv("SCHEDULE_VERSION")
	flag.StringVar(&o.mode, "mode", "field", "field (scripts/field.sh and its faults) or cluster (scripts/cluster.sh and a drill of process kills, cuts and a node kill)")
	flag.StringVar(&o.script, "script", "scripts/field.sh", "the field's script")
	flag.StringVar(&o.out, "out", "", "folder for the histories and logs (default /tmp/acemq-fieldrun/<seed>, /tmp/acemq-fieldrun-N/<seed> for FIELD_INSTANCE=N)")
	flag.DurationVar(&o.bound, "bound", defaultBound(), "every message reaches its end within this of the last heal, or it is stuck (default: 3m plus twice the dead-letter worker's confirm timeout, FIELD_DLX_CONFIRM_TIMEOUT)")
	flag.DurationVar(&o.settle, "settle", 20*time.Second, "how long the producers go on after the last heal")
	flag.Float64Var(&o.rate, "rate", 6, "orders and plain messages per second, each")
	flag.StringVar(&o.soak, "soak", "", "write the soak table (TSV) here")
	flag.DurationVar(&o.sample, "sample", 5*time.Second, "how often the workers write a stats line (and the soak samples the broker)")
	table := flag.String("table", "", "only write the soak table (-soak) from the histories in this folder of a finished run, and exit")
	chans := flag.Bool("sample-channels", false, "only sample the broker's channel count into -out's channels.jsonl until SIGTERM (for a soak whose binary cannot)")
	flag.Parse()
	if *table != "" {
		recs, err := history.Read(*table)
		if err == nil {
			err = writeSoak(o.soak, *table, recs, o.sample)
		}
		if err != nil {
			fail("%v", err)
		}
		return
	}
	if *chans {
		s, err := siteOf(o)
		if err != nil {
			fail("%v", err)
		}
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		sampleChannels(ctx, o.out, s)
		return
	}
	if seed == "" {
		o.seed = rand.Int64N(1 << 31)
	} else {
		n, err := strconv.ParseInt(seed, 10, 64)
		if err != nil {
			fail("SEED=%q is not a number", seed)
		}
		o.seed = n
	}
	o.duration = 4 * time.Minute
	if dur != "" {
		d, err := time.ParseDuration(dur)
		if err != nil {
			fail("DURATION=%q: %v", dur, err)
		}
		o.duration = d
	}
	if o.mode == "field" {
		// A recorded seed replays its schedule only with the version it
		// ran with (docs/field-seeds.tsv); a new run takes the newest.
		o.version = fault.Version
		if version != "" {
			v, err := strconv.Atoi(version)
			if err != nil {
				fail("SCHEDULE_VERSION=%q is not a number", version)
			}
			o.version = v
		}
	}
	if o.out == "" {
		runs := "acemq-fieldrun" // field.sh's instance 0; instance N keeps its own
		if i := os.Getenv("FIELD_INSTANCE"); i != "" && i != "0" {
			runs += "-" + i
		}
		o.out = filepath.Join(os.TempDir(), runs, strconv.FormatInt(o.seed, 10))
	}
	if _, err := rungMode(); err != nil {
		fail("%v", err)
	}
	fmt.Printf("field: seed=%d duration=%s schedule_version=%d mode=%s rungs=%s bound=%s (replay: make field %s)\n", o.seed, o.duration, o.version, o.mode, modeName(), o.bound, o.replay())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	code, err := run(ctx, o)
	if err != nil {
		fmt.Fprintf(os.Stderr, "field: seed=%d: %v\n", o.seed, err)
		if code == 0 {
			code = 2
		}
	}
	os.Exit(code)
}

// replay is what `make field` takes to run o's schedule again.
func (o options) replay() string {
	s := fmt.Sprintf("SEED=%d DURATION=%s", o.seed, o.duration)
	if classic, _ := rungMode(); classic {
		s += " FIELD_RUNGS=classic"
	}
	if o.mode == "cluster" {
		return s + " FIELD_MODE=cluster"
	}
	return s + fmt.Sprintf(" SCHEDULE_VERSION=%d", o.version)
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "field: "+format+"\n", args...)
	os.Exit(2)
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s %s\n", time.Now().UTC().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}

// site is where the run happens: the nodes' URLs, the database, names.
type site struct {
	urls  []string
	ports []string
	pg    string
	names workload.Names
	ctl   []string // rabbitmqctl against one node, for the soak's channel counts
}

func siteOf(o options) (site, error) {
	switch o.mode {
	case "field":
		u, err := exec.Command(o.script, "urls").Output()
		if err != nil {
			return site{}, fmt.Errorf("%s urls: %v", o.script, err)
		}
		pg, err := exec.Command(o.script, "pg-url").Output()
		if err != nil {
			return site{}, fmt.Errorf("%s pg-url: %v", o.script, err)
		}
		classic, _ := rungMode()
		s := site{urls: strings.Split(strings.TrimSpace(string(u)), ","), pg: strings.TrimSpace(string(pg)), names: workload.Names{Prefix: "field.", Tables: "field_", ClassicRungs: classic}}
		for _, x := range s.urls {
			s.ports = append(s.ports, x[strings.LastIndexByte(strings.TrimSuffix(x, "/"), ':')+1:len(strings.TrimSuffix(x, "/"))])
		}
		// rabbitmqctl against a running node of the field's instance,
		// as scripts/field.sh calls it (bounded); FIELD_CTL replaces it.
		s.ctl = []string{o.script, "ctl"}
		if c := os.Getenv("FIELD_CTL"); c != "" {
			s.ctl = strings.Fields(c)
		}
		return s, nil
	case "cluster":
		classic, _ := rungMode()
		s := site{pg: envOr("PG_URL", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"), names: workload.Names{Prefix: "fieldwork.", Tables: "fieldwork_", ClassicRungs: classic}}
		for i := 1; i <= 3; i++ {
			s.urls = append(s.urls, fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d/", 5680+i))
			s.ports = append(s.ports, strconv.Itoa(5680+i))
		}
		if c := os.Getenv("RABBITMQCTL"); c != "" {
			// RABBITMQCTL names the version's own node; the cluster's is c1.
			f := strings.Fields(c)
			for i, x := range f {
				if x == "-n" && i+1 < len(f) {
					f[i+1] = "c1@localhost"
				}
			}
			s.ctl = f
		}
		return s, nil
	}
	return site{}, fmt.Errorf("unknown -mode %q", o.mode)
}

func envOr(k, d string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return d
}

func run(ctx context.Context, o options) (int, error) {
	if err := os.RemoveAll(o.out); err != nil {
		return 2, err
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return 2, err
	}
	s, err := siteOf(o)
	if err != nil {
		return 2, err
	}
	sched, err := newSchedule(o)
	if err != nil {
		return 2, err
	}
	fmt.Printf("field: schedule\n%s", sched.String())
	if err := os.WriteFile(filepath.Join(o.out, "schedule.txt"), []byte(sched.String()), 0o644); err != nil {
		return 2, err
	}

	// The tables and the topology, fresh.
	db, err := sql.Open("pgx", s.pg)
	if err != nil {
		return 2, err
	}
	defer db.Close()
	setup, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := s.names.CreateTables(setup, db); err != nil {
		return 2, fmt.Errorf("tables: %w", err)
	}
	admin, err := workload.NewBroker(setup, s.urls, "field-orchestrator", quietLogger())
	if err != nil {
		return 2, fmt.Errorf("broker: %w", err)
	}
	defer admin.Close(context.Background())
	for _, q := range s.names.Queues() {
		if _, err := admin.DeleteQueue(setup, q); err != nil {
			return 2, fmt.Errorf("delete %s: %w", q, err)
		}
	}
	if err := admin.Declare(setup, s.names.Topology()); err != nil {
		return 2, fmt.Errorf("declare: %w", err)
	}
	// Where each rung lives, before the faults begin and then every 10 s
	// (a move is recorded; a classic queue does not move unless it is
	// declared again elsewhere): the checker attributes a loss in a rung
	// only to a cut of the rung's own node or of its home queue's leader.
	rungs := &rungWatch{o: o, s: s}
	stopRungs := func() {}
	if o.mode == "field" {
		checkDLXTimeout(setup, o)
		rungs.first(ctx)
		stopRungs = rungs.watch(ctx, 10*time.Second)
	}
	defer stopRungs()

	// The workers.
	bin := filepath.Join(o.out, "fieldworker")
	if out, err := exec.CommandContext(setup, "go", "build", "-o", bin, "./internal/cmd/fieldworker").CombinedOutput(); err != nil {
		return 2, fmt.Errorf("build fieldworker: %v\n%s", err, out)
	}
	f := &fleet{bin: bin, out: o.out, rnd: rand.New(rand.NewPCG(uint64(o.seed), 1)), logf: logf}
	defer f.close()
	purls, err := f.startProxies(s.urls)
	if err != nil {
		return 2, err
	}
	roles := []struct{ name, role string }{{"writer", "writer"}, {"relay1", "relay"}, {"relay2", "relay"}, {"publisher", "publisher"}, {"worker", "worker"}, {"inbox", "inbox"}}
	for i, r := range roles {
		// Each process starts on another node: the URLs rotated.
		urls := append(append([]string(nil), purls[i%len(purls):]...), purls[:i%len(purls)]...)
		f.add(r.name, r.role, []string{
			"FIELD_ROLE=" + r.role, "FIELD_PROC=" + r.name, "FIELD_URLS=" + strings.Join(urls, ","), "FIELD_PG=" + s.pg,
			"FIELD_PREFIX=" + s.names.Prefix, "FIELD_TABLES=" + s.names.Tables, "FIELD_HISTORY=" + filepath.Join(o.out, r.name+".jsonl"),
			"FIELD_RATE=" + strconv.FormatFloat(o.rate, 'f', -1, 64), "FIELD_STATS=" + o.sample.String(), "FIELD_AMQP_PORTS=" + proxyPorts(purls),
			"FIELD_RUNGS=" + s.names.RungMode(),
		})
	}
	for _, w := range f.workers {
		if err := f.start(w); err != nil {
			return 2, err
		}
	}
	var sampler sync.WaitGroup
	sctx, stopSampling := context.WithCancel(ctx)
	defer stopSampling()
	if o.soak != "" {
		sampler.Add(1)
		go func() { defer sampler.Done(); sampleBroker(sctx, o, s, admin, db) }()
	}

	// The schedule.
	began := time.Now()
	events, err := sched.Run(ctx, f, o)
	if err != nil {
		logf("field: the schedule failed: %v", err)
	}
	if ctx.Err() != nil {
		return 130, ctx.Err()
	}
	lastHeal := time.Now()
	logf("field: schedule done after %s; healed; load goes on for %s", time.Since(began).Round(time.Second), o.settle)
	sleep(ctx, o.settle)
	stopRungs()
	f.stop(4*time.Minute, "writer", "publisher")
	logf("field: producers stopped; waiting for quiescence (bound %s after the last heal)", o.bound)
	quiet := waitQuiet(ctx, s, admin, db, o.out, lastHeal.Add(o.bound))
	logf("field: quiescent=%v %s after the last heal", quiet, time.Since(lastHeal).Round(time.Second))
	f.stop(30 * time.Second)
	stopSampling()
	sampler.Wait()

	// What the broker and the database hold, and the verdict.
	in, err := collect(ctx, s, admin, db, o.out)
	if err != nil {
		return 2, fmt.Errorf("collect: %w", err)
	}
	in.Seed, in.Duration, in.ScheduleVersion, in.Rungs = o.seed, o.duration, o.version, s.names.RungMode()
	for _, e := range events {
		if e.Phase == "end" {
			in.Heals = append(in.Heals, e.T)
		}
	}
	in.Heals = append(in.Heals, lastHeal)
	in.Faults, in.Partitions, in.Kills, in.Restarts = sched.Counts()
	in.RungTTL, in.RungNodes, in.FaultLog = s.names.Rungs(), rungs.all(), spans(events)
	in.Nodes, in.Tolerance = []string{"f1", "f2", "f3"}, detectionWindow()
	r := check.Check(in)
	if o.soak != "" {
		if err := writeSoak(o.soak, o.out, in.Records, o.sample); err != nil {
			logf("field: soak table: %v", err)
		}
	}
	r.Report(os.Stderr, 50)
	fmt.Println(r.Line())
	if !r.OK() {
		fmt.Fprintf(os.Stderr, "field: FAILED seed=%d (%s); histories in %s; replay: make field %s\n", o.seed, r.Summary(), o.out, o.replay())
		return 1, nil
	}
	return 0, nil
}

func proxyPorts(urls []string) string {
	var p []string
	for _, u := range urls {
		u = strings.TrimSuffix(u, "/")
		p = append(p, u[strings.LastIndexByte(u, ':')+1:])
	}
	return strings.Join(p, ",")
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// waitQuiet waits until every confirmed plain message is at its end,
// every committed order has its effect, the outbox is empty and nothing
// is ready in the work, inbox and rung queues, or until the deadline.
func waitQuiet(ctx context.Context, s site, b *mq.Broker, db *sql.DB, out string, deadline time.Time) bool {
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if quiet(ctx, s, b, db, out) {
			return true
		}
		sleep(ctx, 2*time.Second)
	}
	return quiet(ctx, s, b, db, out)
}

func quiet(ctx context.Context, s site, b *mq.Broker, db *sql.DB, out string) bool {
	c, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var rows, missing int
	if db.QueryRowContext(c, "SELECT count(*) FROM "+s.names.Schema().Outbox).Scan(&rows) != nil || rows > 0 {
		return false
	}
	if db.QueryRowContext(c, fmt.Sprintf("SELECT count(*) FROM %s o WHERE NOT EXISTS (SELECT 1 FROM %s e WHERE e.order_id = o.id)", s.names.OrdersTable(), s.names.EffectsTable())).Scan(&missing) != nil || missing > 0 {
		return false
	}
	recs, err := history.Read(out)
	if err != nil {
		return false
	}
	want := map[string]int{}
	handled := map[string]bool{}
	for _, r := range recs {
		switch r.Kind {
		case history.KindPublished:
			want[r.Expect]++
			if r.Expect == history.EndHandled {
				handled[r.ID] = handled[r.ID] || false
			}
		case history.KindHandled:
			handled[r.ID] = true
		}
	}
	for _, ok := range handled {
		if !ok {
			return false
		}
	}
	q := s.names.Queues()
	work, inbox, dlq, parked, rungs := q[0], q[1], q[2], q[3], q[6:]
	for _, name := range append([]string{work, inbox}, rungs...) {
		if cs, err := ops.Count(c, b, name); err != nil || !cs[0].Exists || cs[0].Ready > 0 {
			return false
		}
	}
	for name, w := range map[string]int{dlq: want[history.EndDLQ], parked: want[history.EndParked]} {
		if cs, err := ops.Count(c, b, name); err != nil || !cs[0].Exists || cs[0].Ready < w {
			return false
		}
	}
	return true
}

// collect reads the histories, the database and what every queue holds.
func collect(ctx context.Context, s site, b *mq.Broker, db *sql.DB, out string) (check.Input, error) {
	var in check.Input
	c, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	var err error
	if in.Records, err = history.Read(out); err != nil {
		return in, err
	}
	rows, err := db.QueryContext(c, "SELECT id, key, seq FROM "+s.names.OrdersTable())
	if err != nil {
		return in, err
	}
	for rows.Next() {
		var o check.Order
		if err := rows.Scan(&o.ID, &o.Key, &o.Seq); err != nil {
			return in, err
		}
		in.Orders = append(in.Orders, o)
	}
	rows.Close()
	rows, err = db.QueryContext(c, "SELECT n, order_id, key, seq, at FROM "+s.names.EffectsTable()+" ORDER BY n")
	if err != nil {
		return in, err
	}
	for rows.Next() {
		var e check.Effect
		if err := rows.Scan(&e.N, &e.OrderID, &e.Key, &e.Seq, &e.T); err != nil {
			return in, err
		}
		in.Effects = append(in.Effects, e)
	}
	rows.Close()
	rows, err = db.QueryContext(c, "SELECT message_id, set_aside_at IS NOT NULL FROM "+s.names.Schema().Outbox)
	if err != nil {
		return in, err
	}
	for rows.Next() {
		var id string
		var aside bool
		if err := rows.Scan(&id, &aside); err != nil {
			return in, err
		}
		where := "the outbox table"
		if aside {
			where = "the outbox table, set aside"
		}
		in.Remaining = append(in.Remaining, check.Place{ID: id, Where: where})
	}
	rows.Close()
	q := s.names.Queues()
	for i, name := range q {
		ids, err := drain(c, b, name)
		if err != nil {
			return in, fmt.Errorf("drain %s: %w", name, err)
		}
		switch i {
		case 2:
			in.DLQ = ids
		case 3:
			in.Parked = ids
		default:
			for _, id := range ids {
				in.Remaining = append(in.Remaining, check.Place{ID: id, Where: name})
			}
		}
	}
	return in, nil
}

// drain takes every message of queue (basic.get, acknowledged: the run
// is over) and returns their message ids.
func drain(ctx context.Context, b *mq.Broker, queue string) ([]string, error) {
	ch, err := b.Channel(ctx)
	if err != nil {
		return nil, err
	}
	defer ch.Close()
	return drainFrom(ctx, ch, queue)
}

// getter is the part of a channel drain uses.
type getter interface {
	Get(queue string, autoAck bool) (amqp.Delivery, bool, error)
	Close() error
}

// drainFrom is drain on ch. A basic.get has no bound of its own (a quorum
// queue without a leader may never answer), so ch is closed when ctx
// ends, which ends the get in flight.
func drainFrom(ctx context.Context, ch getter, queue string) ([]string, error) {
	stop := context.AfterFunc(ctx, func() { _ = ch.Close() })
	defer stop()
	var ids []string
	for ctx.Err() == nil {
		d, ok, err := ch.Get(queue, false)
		if err != nil {
			if ctx.Err() != nil {
				return ids, fmt.Errorf("%w (a basic.get unanswered)", ctx.Err())
			}
			return ids, err
		}
		if !ok {
			return ids, nil
		}
		ids = append(ids, d.MessageId)
		if err := d.Ack(false); err != nil {
			return ids, err
		}
	}
	return ids, ctx.Err()
}

// faultEvent is one line of the run's fault log.
type faultEvent struct {
	T     time.Time `json:"t"`
	Kind  string    `json:"kind"`
	Args  []string  `json:"args,omitempty"`
	Phase string    `json:"phase"`
	Err   string    `json:"err,omitempty"`
	Note  string    `json:"note,omitempty"` // which node a partition-leader cut, and why
}

// eventLog writes fault events to out/faults.log and stderr.
type eventLog struct {
	mu     sync.Mutex
	f      *os.File
	events []faultEvent
}

func newEventLog(out string) (*eventLog, error) {
	f, err := os.Create(filepath.Join(out, "faults.log"))
	return &eventLog{f: f}, err
}

func (l *eventLog) add(e faultEvent) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, e)
	b, _ := json.Marshal(e)
	fmt.Fprintln(l.f, string(b))
	msg := fmt.Sprintf("fault %s %s %v", e.Phase, e.Kind, e.Args)
	if e.Err != "" {
		msg += ": " + e.Err
	}
	if e.Note != "" {
		msg += ": " + e.Note
	}
	logf("%s", msg)
}

func (l *eventLog) close() []faultEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.f.Close()
	return l.events
}
