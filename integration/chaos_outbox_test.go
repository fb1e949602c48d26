//go:build chaos

package integration

// The outbox's fault scenario (issue 23): effects exactly once through the
// outbox and the inbox while the relay is killed, the broker connection is
// cut, the consumer restarts and PostgreSQL restarts. PostgreSQL here is a
// cluster of the test's own (initdb on a port of its own, removed after):
// the machine's is never stopped.

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/acemq/acemq-go/internal/testenv"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/outbox"
	"github.com/acemq/acemq-go/retry"
	"github.com/acemq/acemq-go/topology"
)

// The child relay's environment: set, the test binary is a relay and
// nothing else (see init).
const (
	outboxChildEnv    = "GOIT_OUTBOX_RELAY_CHILD" // the database URL
	outboxChildAMQP   = "GOIT_OUTBOX_RELAY_AMQP"
	outboxChildTables = "GOIT_OUTBOX_RELAY_TABLES" // outbox,inbox
)

// init turns the test binary into the child relay when the scenario starts
// it so: a relay that runs until SIGTERM (or the SIGKILL the scenario is
// about), in a process of its own, as a service instance would.
func init() {
	dbURL := os.Getenv(outboxChildEnv)
	if dbURL == "" {
		return
	}
	os.Exit(outboxChild(dbURL))
}

func outboxChild(dbURL string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	db, err := sql.Open("pgx", dbURL)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child relay:", err)
		return 2
	}
	defer db.Close()
	b := mq.New(mq.Config{URLs: []string{os.Getenv(outboxChildAMQP)}, ConnectionName: "goit.outbox.child-relay",
		Heartbeat: 2 * time.Second, ReconnectMin: 20 * time.Millisecond, ReconnectMax: 300 * time.Millisecond})
	sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	err = b.Start(sctx)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "child relay: broker:", err)
		return 2
	}
	defer b.Close(context.Background())
	names := strings.SplitN(os.Getenv(outboxChildTables), ",", 2)
	r := outbox.NewRelay(db, b, outbox.WithSchema(outbox.Schema{Outbox: names[0], Inbox: names[1]}),
		outbox.BatchSize(25), outbox.PollInterval(200*time.Millisecond), outbox.PublishTimeout(10*time.Second))
	if err := r.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "child relay:", err)
		return 1
	}
	return 0
}

// outboxPG is a PostgreSQL cluster of the test's own.
type outboxPG struct {
	t    *testing.T
	dir  string
	port int
	bin  string
	as   []string // runuser -u postgres -- when running as root
}

// outboxOwnPG initdb's a cluster in a temporary directory, starts it on a
// free port, and stops and removes it when the test ends.
func outboxOwnPG(t *testing.T) *outboxPG {
	t.Helper()
	pg := &outboxPG{t: t, bin: "/usr/lib/postgresql/15/bin"}
	if p, err := exec.LookPath("initdb"); err == nil {
		pg.bin = filepath.Dir(p)
	}
	dir, err := os.MkdirTemp("", "goit-pg-")
	if err != nil {
		t.Fatal(err)
	}
	pg.dir = dir
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if os.Geteuid() == 0 { // initdb refuses root: run as postgres
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("running as root and no postgres user: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
		pg.as = []string{"runuser", "-u", "postgres", "--"}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	pg.port = ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	pg.run("initdb", "-D", filepath.Join(dir, "data"), "-A", "trust", "-U", "postgres", "--no-sync")
	pg.start()
	t.Cleanup(func() { pg.ctl("stop", "-m", "immediate") })
	return pg
}

func (pg *outboxPG) run(tool string, args ...string) {
	pg.t.Helper()
	argv := append(append(append([]string{}, pg.as...), filepath.Join(pg.bin, tool)), args...)
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		pg.t.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, out)
	}
}

func (pg *outboxPG) ctl(args ...string) {
	pg.t.Helper()
	pg.run("pg_ctl", append([]string{"-D", filepath.Join(pg.dir, "data"), "-w", "-t", "60"}, args...)...)
}

func (pg *outboxPG) start() {
	pg.t.Helper()
	pg.ctl("start", "-l", filepath.Join(pg.dir, "log"),
		"-o", fmt.Sprintf("-p %d -c listen_addresses=127.0.0.1 -k %s -c max_connections=200", pg.port, pg.dir))
}

// restart stops the cluster the hard way (immediate: no checkpoint, crash
// recovery on start) and starts it again.
func (pg *outboxPG) restart() {
	pg.t.Helper()
	pg.ctl("stop", "-m", "immediate")
	pg.start()
}

func (pg *outboxPG) url() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", pg.port)
}

// outboxChildRelay is the relay's process.
type outboxChildRelay struct {
	cmd  *exec.Cmd
	done chan struct{}
}

func outboxStartChild(t *testing.T, dbURL, amqpURL string, s outbox.Schema, log *os.File) *outboxChildRelay {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), outboxChildEnv+"="+dbURL, outboxChildAMQP+"="+amqpURL, outboxChildTables+"="+s.Outbox+","+s.Inbox)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &outboxChildRelay{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(c.done) }()
	return c
}

func (c *outboxChildRelay) kill() {
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	<-c.done
}

func (c *outboxChildRelay) stop(t *testing.T) {
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(30 * time.Second):
		t.Errorf("the child relay did not stop on SIGTERM within 30 s")
		c.kill()
	}
}

// N orders, each written with its order.placed event in one transaction
// by 4 concurrent writers (every 10th rolled back on purpose), while two
// relays, each in a child process of its own sharing the table, are
// killed with SIGKILL 4 times in all, each time while the one killed holds
// claimed rows; their broker connections are cut twice through a proxy,
// the consumer is restarted twice and PostgreSQL is restarted once. The
// consumer books through the inbox. At the end every committed order's event was
// delivered (lost=0), none of a rolled-back order was, and the effects
// table has exactly one row per committed order (effects=N).
//
// The CHAOS line: deliveries is every delivery the consumer saw (requeues
// while PostgreSQL was down included), duplicates_suppressed those the
// inbox acknowledged unhandled, handler_calls the bookings tried (one
// more than effects for each whose transaction did not commit), mid_batch
// the kills that hit the relay while it held claimed rows.
func TestChaosOutboxKillRelay(t *testing.T) {
	const (
		orders  = 1200
		writers = 4
		kills   = 4
		cuts    = 2
		spread  = 12 * time.Second
	)
	ctx := testenv.Context(t, 4*time.Minute)
	pg := outboxOwnPG(t)
	db := outboxOpen(t, pg.url())
	db.SetMaxOpenConns(40)
	s := outboxTables(t, db)
	if _, err := db.ExecContext(ctx, `CREATE TABLE goit_orders (id text PRIMARY KEY); CREATE TABLE goit_effects (order_id text NOT NULL)`); err != nil {
		t.Fatal(err)
	}

	direct := chaosBroker(t, nil, testenv.Name(t, "direct"), "")
	q := testenv.Queue(t, direct, retry.Policy{}, topology.Classic())
	proxy, proxied := testenv.Proxy(t)
	lg := newChaosLog(t)
	cb := chaosBroker(t, lg, testenv.Name(t, "consumer"), proxied)

	// The consumer: every delivery counted, then the inbox, then the
	// booking in the inbox's transaction.
	var delivered, calls atomic.Int64
	seenRolled := map[string]bool{}
	var mu sync.Mutex
	rolledBack := map[string]bool{}
	count := func(next mq.Handler) mq.Handler {
		return mq.HandlerFunc(func(ctx context.Context, d *mq.Delivery) error {
			delivered.Add(1)
			mu.Lock()
			if rolledBack[d.MessageId] {
				seenRolled[d.MessageId] = true
			}
			mu.Unlock()
			return next.Handle(ctx, d)
		})
	}
	book := mq.HandlerFunc(func(ctx context.Context, d *mq.Delivery) error {
		calls.Add(1)
		if _, err := outbox.Tx(ctx).ExecContext(ctx, "INSERT INTO goit_effects (order_id) VALUES ($1)", d.MessageId); err != nil {
			return mq.Requeue(err) // the database is restarting: again later
		}
		return nil
	})
	consume := func() *mq.Consumer {
		return chaosConsume(t, ctx, cb, q, book, mq.WithConcurrency(8), mq.WithPrefetch(32), mq.WithRequeuePause(50*time.Millisecond),
			mq.WithMiddleware(count, outbox.Inbox(db, outbox.WithSchema(s))))
	}
	c := consume()

	logf, err := os.CreateTemp("", "goit-outbox-relay-*.log")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = logf.Close(); _ = os.Remove(logf.Name()) })
	// Two relays, two processes, one table (two service instances).
	relayDB := func(i int) string { return fmt.Sprintf("%s&application_name=goit-outbox-relay-%d", pg.url(), i) }
	var relays [2]*outboxChildRelay
	for i := range relays {
		relays[i] = outboxStartChild(t, relayDB(i), proxied, s, logf)
	}
	t.Cleanup(func() { // whichever children run last, even when the test fails early
		for _, r := range relays {
			r.kill()
		}
	})

	// The writers: order i at start + i/orders of spread; a write that
	// fails (PostgreSQL restarting) is tried again with the same id until
	// it commits or the order is found to exist.
	ob := outbox.New(outbox.WithSchema(s))
	start := time.Now()
	var wg sync.WaitGroup
	var writeRetries atomic.Int64
	for w := range writers {
		wg.Go(func() {
			for i := w; i < orders; i += writers {
				if d := time.Until(start.Add(spread * time.Duration(i) / orders)); d > 0 {
					time.Sleep(d)
				}
				id := fmt.Sprintf("order-%05d", i)
				commit := i%10 != 9
				if !commit {
					mu.Lock()
					rolledBack[id] = true
					mu.Unlock()
				}
				for ctx.Err() == nil {
					err := outboxWrite(ctx, db, ob, "", q, mq.Message{MessageId: id, Type: "order.placed", Body: []byte(id)}, commit,
						func(tx *sql.Tx) error {
							_, err := tx.ExecContext(ctx, "INSERT INTO goit_orders (id) VALUES ($1)", id)
							return err
						})
					if err == nil || strings.Contains(err.Error(), "duplicate key") {
						break
					}
					writeRetries.Add(1)
					time.Sleep(100 * time.Millisecond)
				}
			}
		})
	}

	// The faults, spread over the writing: kills, cuts, two consumer
	// restarts and one PostgreSQL restart, in a random order.
	type fault struct {
		name string
		do   func()
	}
	var faults []fault
	midBatch := 0
	for k := range kills {
		i := k % len(relays)
		faults = append(faults, fault{fmt.Sprintf("kill relay %d", i), func() {
			// Mid-batch: when the relay's transaction holds claimed rows
			// while their publishes wait for the broker.
			if testenv.Poll(3*time.Second, func() bool {
				return outboxCount(t, db, "pg_stat_activity", "application_name = $1 AND state = 'idle in transaction'", fmt.Sprint("goit-outbox-relay-", i)) > 0
			}) {
				midBatch++
			}
			relays[i].kill()
			time.Sleep(time.Duration(50+rand.N(200)) * time.Millisecond)
			relays[i] = outboxStartChild(t, relayDB(i), proxied, s, logf)
		}})
	}
	for range cuts {
		faults = append(faults, fault{"cut broker connections", func() { proxy.Cut() }})
	}
	for range 2 {
		faults = append(faults, fault{"restart consumer", func() {
			testenv.Stop(t, c)
			c = consume()
		}})
	}
	faults = append(faults, fault{"restart PostgreSQL", pg.restart})
	rand.Shuffle(len(faults), func(i, j int) { faults[i], faults[j] = faults[j], faults[i] })
	for i, f := range faults {
		time.Sleep(time.Until(start.Add(spread * time.Duration(i+1) / time.Duration(len(faults)+1))))
		at := time.Now()
		f.do()
		t.Logf("%s at %v (took %v)", f.name, at.Sub(start).Round(time.Millisecond), time.Since(at).Round(time.Millisecond))
	}
	wg.Wait()

	// Settle: the outbox drained, every committed order booked.
	committed := outboxCount(t, db, "goit_orders", "")
	settled := testenv.Poll(90*time.Second, func() bool {
		return outboxCount(t, db, s.Outbox, "") == 0 && outboxCount(t, db, "goit_effects", "") >= committed && testenv.Count(t, direct, q) == 0
	})
	if !settled {
		t.Errorf("not settled within 90 s: %d outbox rows, %d effects of %d orders, %d in the queue",
			outboxCount(t, db, s.Outbox, ""), outboxCount(t, db, "goit_effects", ""), committed, testenv.Count(t, direct, q))
	}
	time.Sleep(500 * time.Millisecond) // late duplicates, if any, arrive
	for _, r := range relays {
		r.stop(t)
	}
	testenv.Stop(t, c)

	effects := outboxCount(t, db, "goit_effects", "")
	distinct := outboxCount(t, db, "(SELECT DISTINCT order_id FROM goit_effects) e", "")
	lost := outboxCount(t, db, "goit_orders o", "NOT EXISTS (SELECT 1 FROM goit_effects e WHERE e.order_id = o.id)")
	strays := outboxCount(t, db, "goit_effects e", "NOT EXISTS (SELECT 1 FROM goit_orders o WHERE o.id = e.order_id)")
	aside := outboxCount(t, db, s.Outbox, "set_aside_at IS NOT NULL")
	mu.Lock()
	rolled, rolledSeen := len(rolledBack), len(seenRolled)
	mu.Unlock()
	suppressed := lg.Count(outbox.EventDuplicate)
	if committed != orders-rolled {
		t.Errorf("%d orders committed, want %d (%d rolled back)", committed, orders-rolled, rolled)
	}
	if lost != 0 {
		t.Errorf("%d committed orders never booked", lost)
	}
	if effects != committed || distinct != committed {
		t.Errorf("effects=%d (distinct %d) for %d committed orders: want exactly one each", effects, distinct, committed)
	}
	if strays != 0 || rolledSeen != 0 {
		t.Errorf("rolled-back orders: %d booked, %d delivered", strays, rolledSeen)
	}
	if aside != 0 {
		t.Errorf("%d rows set aside", aside)
	}
	if midBatch == 0 {
		t.Errorf("no kill landed mid-batch")
	}
	if b, err := os.ReadFile(logf.Name()); err == nil && len(b) > 0 {
		t.Logf("child relay output:\n%s", b)
	}
	line := fmt.Sprintf("CHAOS outbox: orders=%d committed=%d rolled_back=%d deliveries=%d duplicates_suppressed=%d handler_calls=%d effects=%d lost=%d rolled_back_delivered=%d relays=2 kills=%d mid_batch=%d cuts=%d consumer_restarts=2 pg_restarts=1 write_retries=%d",
		orders, committed, rolled, delivered.Load(), suppressed, calls.Load(), effects, lost, rolledSeen,
		kills, midBatch, cuts, writeRetries.Load())
	if t.Failed() {
		line += " FAILED"
	}
	t.Log(line)
	fmt.Println(line)
	chaosSummary.add(line)
}
