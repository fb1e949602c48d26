//go:build integration

package integration

// The fate matrix's rig (fate_matrix_test.go): the paths, one cell's run,
// the recorder every consumer of a cell reports to (in this process, or
// in a child process that is killed with SIGKILL), and the verdict.

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/internal/testenv"
	"github.com/acemq/acemq-go/middleware"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/ops"
	"github.com/acemq/acemq-go/outbox"
	"github.com/acemq/acemq-go/retry"
	"github.com/acemq/acemq-go/topology"
)

// fmStep is what the handler does on one call.
type fmStep int

const (
	stepOK      fmStep = iota // returns nil
	stepFail                  // an ordinary failure: the ladder
	stepRequeue               // mq.Requeue: a dependency is down
	stepReject                // middleware.Reject: straight to .dlq
	stepPark                  // middleware.Park: to .parked
)

// fmPlace is where a message's path leads.
type fmPlace string

const (
	placeAcked  fmPlace = "acked"
	placeDLQ    fmPlace = "dlq"
	placeParked fmPlace = "parked"
)

// fmPath is one fate path: the policy (its waits; the quorum column
// prepends three), what the handler does by attempt (replayed: the copy
// ops.Replay moved back), where the message ends, which queue its fate
// publishes to, and where a Stop, a kill or a cut hits it: during the
// call of attempt trigAt, or just after it returned (in its wait, its
// requeue pause).
type fmPath struct {
	name         string
	waits        []time.Duration
	limit        time.Duration // retry.InProcessLimit
	script       func(attempt int, replayed bool) fmStep
	place        fmPlace
	target       string // "dlq", "parked", "rung" or ""
	trigAt       int
	trigAfter    bool
	trigReplayed bool
}

const (
	fmShort   = 20 * time.Millisecond // an in-process wait, a requeue pause
	fmLong    = 2 * time.Second       // a wait or pause an event must hit
	fmRung    = time.Second           // a broker rung
	fmLimit   = 3 * time.Second       // in-process up to here
	fmRungCap = 500 * time.Millisecond
)

func fmAlways(s fmStep) func(int, bool) fmStep { return func(int, bool) fmStep { return s } }

// fmFirst fails attempt 1 with s, then succeeds.
func fmFirst(s fmStep) func(int, bool) fmStep {
	return func(a int, _ bool) fmStep {
		if a == 1 {
			return s
		}
		return stepOK
	}
}

var (
	fmPathAck     = fmPath{name: "ack", waits: []time.Duration{fmShort}, limit: fmLimit, script: fmAlways(stepOK), place: placeAcked, trigAt: 1}
	fmPathRequeue = fmPath{name: "requeue", waits: []time.Duration{fmShort}, limit: fmLimit, script: fmFirst(stepRequeue), place: placeAcked, trigAt: 1, trigAfter: true}
	fmPathReject  = fmPath{name: "reject", waits: []time.Duration{fmShort}, limit: fmLimit, script: fmAlways(stepReject), place: placeDLQ, target: "dlq", trigAt: 1}
	fmPathWait    = fmPath{name: "wait", waits: []time.Duration{fmShort, fmShort}, limit: fmLimit, script: fmFirst(stepFail), place: placeAcked, trigAt: 1, trigAfter: true}
	fmPathRung    = fmPath{name: "rung", waits: []time.Duration{fmRung}, limit: fmRungCap, script: fmFirst(stepFail), place: placeAcked, target: "rung", trigAt: 2}
	fmPathDLQ     = fmPath{name: "dlq", waits: []time.Duration{fmShort}, limit: fmLimit, script: fmAlways(stepFail), place: placeDLQ, target: "dlq", trigAt: 2}
	fmPathParked  = fmPath{name: "parked", waits: []time.Duration{fmShort}, limit: fmLimit, script: fmAlways(stepPark), place: placeParked, target: "parked", trigAt: 1}
	fmPathCarried = fmPath{name: "carried", waits: []time.Duration{fmLong}, limit: fmLimit, script: fmFirst(stepFail), place: placeAcked, trigAt: 1, trigAfter: true}
	fmPathReplay  = fmPath{name: "replay", waits: []time.Duration{fmShort}, limit: fmLimit, script: func(_ int, replayed bool) fmStep {
		if replayed {
			return stepOK
		}
		return stepFail
	}, place: placeAcked, trigAt: 1, trigReplayed: true}
	fmPathInbox = fmPath{name: "inbox", waits: []time.Duration{fmShort}, limit: fmLimit, script: fmAlways(stepOK), place: placeAcked, trigAt: 1}
)

// fmPathNamed is the path of fmTable called name.
func fmPathNamed(name string) (fmPath, bool) {
	for _, r := range fmTable {
		if r.path.name == name {
			return r.path, true
		}
	}
	return fmPath{}, false
}

// fmSpec is one cell made concrete: the path under the event.
type fmSpec struct {
	path     fmPath
	ev       string
	policy   retry.Policy
	ids      []string // one per published copy, in publish order
	subject  string   // the message the path's script applies to
	shift    int      // requeues before the path (the quorum column)
	pause    time.Duration
	declared bool // declared with topology.Retry, consumed with StandardDeclared
	place    fmPlace
	forgets  bool // the docs allow an event to forget in-process attempts
}

func fmSpecOf(path fmPath, ev string) fmSpec {
	s := fmSpec{path: path, ev: ev, ids: []string{"m0"}, subject: "m0", pause: fmShort, place: path.place}
	waits := slices.Clone(path.waits)
	hit := ev == evStop || ev == evKill || ev == evCut || path.name == fmPathCarried.name
	if hit && path.trigAfter && path.name == fmPathWait.name {
		waits[0] = fmLong
	}
	if hit && path.trigAfter && path.name == fmPathRequeue.name {
		s.pause = fmLong
	}
	if ev == evQuorum {
		s.shift = 3
		waits = append([]time.Duration{fmShort, fmShort, fmShort}, waits...)
	}
	s.policy = retry.Waits(waits...).With(retry.InProcessLimit(path.limit))
	if path.name == fmPathDLQ.name && ev == evNone {
		// Issue 38 defect 7: a one-attempt policy, declared with the queue.
		s.policy, s.declared = retry.Fixed(1, fmShort), true
	}
	switch {
	case ev == evInOrder:
		s.ids = []string{"m0", "m1", "m2"}
	case path.name == fmPathInbox.name:
		s.ids = []string{"m0", "m0"} // the second is the duplicate
	}
	if path.name == fmPathRung.name && ev == evMissing {
		s.place = placeDLQ // a missing rung sets the message aside (rung-missing)
	}
	// A kill -9 forgets the in-process attempts since the message last
	// went through the broker, and so may a restart (a new consumer after
	// Stop: the stop and dlq-refuses columns) but for what the broker
	// counted (docs/reliability.md, "A message never forgets"); under
	// InOrder a wait cut short by Stop keeps the message in its place at
	// that cost (README, docs/reliability.md, issue 38). What is never
	// forgiven: a call after the fate was decided.
	s.forgets = ev == evKill || ev == evStop || ev == evDLQ || (path.name == fmPathCarried.name && ev == evInOrder)
	return s
}

// trigger is where a Stop, a kill or a cut hits the cell's path; a held
// call waits for until ("drain", "ctx", or "": nothing, it is killed).
func (s fmSpec) trigger(until string) *fmTrigger {
	at := s.path.trigAt
	if !s.path.trigReplayed {
		at += s.shift
	}
	return &fmTrigger{id: s.subject, attempt: at, replayed: s.path.trigReplayed, after: s.path.trigAfter, until: until}
}

// step is what the handler does for message id at attempt a.
func (s fmSpec) step(id string, a int, replayed bool) fmStep {
	if id != s.subject {
		return stepOK
	}
	if !replayed && s.shift > 0 {
		if a <= s.shift {
			return stepRequeue
		}
		a -= s.shift
	}
	return s.path.script(a, replayed)
}

func fmErr(st fmStep, id string, a int) error {
	err := fmt.Errorf("%s fails at attempt %d", id, a)
	switch st {
	case stepFail:
		return err
	case stepRequeue:
		return mq.Requeue(err)
	case stepReject:
		return middleware.Reject(err)
	case stepPark:
		return middleware.Park(err)
	}
	return nil
}

// fmCall is one call of the handler.
type fmCall struct {
	ID          string
	Attempt     int
	Replayed    bool
	Start, End  time.Time
	Interrupted bool // its context ended while it ran: cut mid-call
	Step        fmStep
	Proc        int
}

// fmDelivery is one delivery as the consumer's DeliveryHook and the
// app's outermost middleware saw it.
type fmDelivery struct {
	ID       string
	Outer    int    // calls of the outermost middleware
	OuterOut string // d.Outcome() when its next returned
	Panicked bool   // its next panicked: it returned nothing to read an outcome after
	HookOut  string // d.Outcome() in OnDeliveryDone: what was carried out
	Proc     int
}

// fmTrigger is where a Stop, a kill or a cut hits the path.
type fmTrigger struct {
	id       string
	attempt  int
	replayed bool
	after    bool
	until    string // what a held call waits for: "drain" (Stop), "ctx" (cut), "" (kill: nothing)
	fired    atomic.Bool
}

func (tr *fmTrigger) hits(id string, a int, replayed bool) bool {
	return tr != nil && id == tr.id && a == tr.attempt && replayed == tr.replayed && tr.fired.CompareAndSwap(false, true)
}

// fmRec records what a cell's consumers did. In a child process emit
// writes each record to stdout, for the parent to read.
type fmRec struct {
	mu     sync.Mutex
	proc   int
	calls  []fmCall
	dels   []fmDelivery
	open   map[*mq.Delivery]*fmDelivery
	marks  []time.Time // when a Stop, kill or cut hit
	emit   func(fmLine)
	onHit  func()
	panics map[string]bool
}

// fmLine is one record on a child's stdout.
type fmLine struct {
	K    string      // "call", "del", "reached"
	Call *fmCall     `json:",omitempty"`
	Del  *fmDelivery `json:",omitempty"`
}

func newFmRec(proc int) *fmRec {
	return &fmRec{proc: proc, open: map[*mq.Delivery]*fmDelivery{}, panics: map[string]bool{}}
}

func (r *fmRec) mark() {
	r.mu.Lock()
	r.marks = append(r.marks, time.Now())
	r.mu.Unlock()
}

func (r *fmRec) addCall(c fmCall) {
	r.mu.Lock()
	r.calls = append(r.calls, c)
	emit := r.emit
	r.mu.Unlock()
	if emit != nil {
		emit(fmLine{K: "call", Call: &c})
	}
}

// OnDelivery implements mq.DeliveryHook.
func (r *fmRec) OnDelivery(ctx context.Context, d *mq.Delivery) context.Context {
	r.mu.Lock()
	r.open[d] = &fmDelivery{ID: d.MessageId, Proc: r.proc}
	r.mu.Unlock()
	return ctx
}

// OnDeliveryDone implements mq.DeliveryHook.
func (r *fmRec) OnDeliveryDone(_ context.Context, d *mq.Delivery, _ error) {
	r.mu.Lock()
	e := r.open[d]
	delete(r.open, d)
	if e == nil {
		e = &fmDelivery{ID: d.MessageId, Proc: r.proc}
	}
	e.HookOut = string(d.Outcome())
	r.dels = append(r.dels, *e)
	emit := r.emit
	r.mu.Unlock()
	if emit != nil {
		emit(fmLine{K: "del", Del: e})
	}
}

// outer is the app's outermost middleware: it records what it saw when
// next returned, or that next panicked (a middleware inside it failed
// after the chain: the library recovers that, and the rule for what the
// outer middleware reads is about a next that returns).
func (r *fmRec) outer() mq.Middleware {
	return func(next mq.Handler) mq.Handler {
		return mq.HandlerFunc(func(ctx context.Context, d *mq.Delivery) error {
			returned := false
			defer func() {
				r.mu.Lock()
				if e := r.open[d]; e != nil {
					e.Outer++
					e.OuterOut, e.Panicked = string(d.Outcome()), !returned
				}
				r.mu.Unlock()
			}()
			err := next.Handle(ctx, d)
			returned = true
			return err
		})
	}
}

// panicker panics after its next returned, on the first delivery of id:
// a middleware outside the chain that fails after the fate was decided.
func (r *fmRec) panicker(id string) mq.Middleware {
	return func(next mq.Handler) mq.Handler {
		return mq.HandlerFunc(func(ctx context.Context, d *mq.Delivery) error {
			err := next.Handle(ctx, d)
			r.mu.Lock()
			first := d.MessageId == id && !r.panics[id]
			r.panics[id] = true
			r.mu.Unlock()
			if first {
				panic("the outer middleware fails after the chain returned")
			}
			return err
		})
	}
}

// cutter cuts the connection, once, right after its next returned on a
// delivery of id whose fate was carried out (a confirmed hop to a rung,
// .dlq or .parked): the consumer has not yet acknowledged the original,
// so its ack is lost with the connection (the ack-lost column).
func (r *fmRec) cutter(id string, cut func()) mq.Middleware {
	var once sync.Once
	return func(next mq.Handler) mq.Handler {
		return mq.HandlerFunc(func(ctx context.Context, d *mq.Delivery) error {
			err := next.Handle(ctx, d)
			switch d.Outcome() {
			case mq.OutcomeRetry, mq.OutcomeDeadLetter, mq.OutcomePark:
				if d.MessageId == id {
					once.Do(func() {
						r.mark()
						cut()
					})
				}
			}
			return err
		})
	}
}

// handler is the application's handler: it does what s says, and holds
// (or marks) the call tr names.
func (r *fmRec) handler(s fmSpec, tr *fmTrigger) mq.Handler {
	return mq.HandlerFunc(func(ctx context.Context, d *mq.Delivery) error {
		a := d.Attempt()
		replayed := d.Headers[mq.HeaderReplayedAt] != nil
		st := s.step(d.MessageId, a, replayed)
		c := fmCall{ID: d.MessageId, Attempt: a, Replayed: replayed, Start: time.Now(), Step: st, Proc: r.proc}
		if tr.hits(d.MessageId, a, replayed) {
			if tr.after {
				defer r.onHit()
			} else {
				r.onHit()
				switch tr.until {
				case "drain":
					select {
					case <-d.Draining():
					case <-ctx.Done():
					case <-time.After(30 * time.Second):
					}
				case "ctx":
					select {
					case <-ctx.Done():
					case <-time.After(30 * time.Second):
					}
				default: // killed here
					<-time.After(time.Minute)
				}
				c.Interrupted = ctx.Err() != nil
			}
		}
		c.End = time.Now()
		r.addCall(c)
		if c.Interrupted {
			return ctx.Err()
		}
		return fmErr(st, d.MessageId, a)
	})
}

// fmEnv is what a consumer of a cell needs besides its broker.
type fmEnv struct {
	db     *sql.DB
	schema outbox.Schema
	manual bool   // the test declared the failure half: consume WithoutDeclare
	cut    func() // ack-lost: cuts the consumer's connection
}

// fmConsume starts a consumer of q for the cell s, reporting to r.
func fmConsume(ctx context.Context, b *mq.Broker, q string, s fmSpec, r *fmRec, env fmEnv, tr *fmTrigger) (*mq.Consumer, error) {
	opts := []mq.ConsumerOption{mq.WithMiddleware(r.outer())}
	if s.ev == evPanic {
		opts = append(opts, mq.WithMiddleware(r.panicker(s.subject)))
	}
	if env.cut != nil {
		opts = append(opts, mq.WithMiddleware(r.cutter(s.subject, env.cut)))
	}
	switch {
	case s.declared:
		opts = append(opts, middleware.StandardDeclared())
	case env.manual:
		opts = append(opts, middleware.Standard(s.policy, middleware.WithoutDeclare()))
	default:
		opts = append(opts, middleware.Standard(s.policy))
	}
	if env.db != nil {
		opts = append(opts, mq.WithMiddleware(outbox.Inbox(env.db, outbox.WithSchema(env.schema))))
	}
	opts = append(opts, mq.WithRequeuePause(s.pause))
	if s.ev == evInOrder {
		opts = append(opts, mq.InOrder())
	}
	return b.Consume(ctx, q, r.handler(s, tr), opts...)
}

// The child: the test binary re-executed as one consumer of a cell, to be
// killed with SIGKILL. fmChildEnv holds its fmChildArgs as JSON.
const fmChildEnv = "GOIT_FATE_MATRIX_CHILD"

type fmChildArgs struct {
	Path, Event, Queue, URL, DB string
	Schema                      outbox.Schema
	Manual                      bool
}

func init() {
	if v := os.Getenv(fmChildEnv); v != "" {
		os.Exit(fmChild(v))
	}
}

func fmChild(v string) int {
	var a fmChildArgs
	if err := json.Unmarshal([]byte(v), &a); err != nil {
		fmt.Fprintln(os.Stderr, "fate child:", err)
		return 2
	}
	path, ok := fmPathNamed(a.Path)
	if !ok {
		fmt.Fprintln(os.Stderr, "fate child: no path", a.Path)
		return 2
	}
	s := fmSpecOf(path, a.Event)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // never outlives a test
	defer cancel()
	var out sync.Mutex
	enc := json.NewEncoder(os.Stdout)
	r := newFmRec(1)
	r.emit = func(l fmLine) {
		out.Lock()
		defer out.Unlock()
		_ = enc.Encode(l)
	}
	r.onHit = func() { r.emit(fmLine{K: "reached"}) }
	env := fmEnv{manual: a.Manual, schema: a.Schema}
	if a.DB != "" {
		db, err := sql.Open("pgx", a.DB)
		if err != nil {
			fmt.Fprintln(os.Stderr, "fate child:", err)
			return 2
		}
		defer db.Close()
		env.db = db
	}
	b := mq.New(mq.Config{URLs: []string{a.URL}, Logger: testenv.Discard(), ConnectionName: "goit.fate-matrix.child", Hooks: []any{r}})
	if err := b.Start(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "fate child: broker:", err)
		return 2
	}
	if _, err := fmConsume(ctx, b, a.Queue, s, r, env, s.trigger("")); err != nil {
		fmt.Fprintln(os.Stderr, "fate child: consume:", err)
		return 2
	}
	<-ctx.Done()
	return 3
}

// fmStartChild starts a child consumer of the cell, whose records go to r
// (its trigger's hit calls hit), and returns its kill: SIGKILL, then wait.
func fmStartChild(t *testing.T, a fmChildArgs, r *fmRec, hit func()) (kill func()) {
	t.Helper()
	js, _ := json.Marshal(a)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fmChildEnv+"="+string(js))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	read := make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var l fmLine
			if json.Unmarshal(sc.Bytes(), &l) != nil {
				continue
			}
			r.mu.Lock()
			switch {
			case l.K == "call" && l.Call != nil:
				r.calls = append(r.calls, *l.Call)
			case l.K == "del" && l.Del != nil:
				r.dels = append(r.dels, *l.Del)
			}
			r.mu.Unlock()
			if l.K == "reached" {
				hit()
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	var once sync.Once
	kill = func() {
		once.Do(func() {
			_ = cmd.Process.Signal(syscall.SIGKILL)
			<-read
			_ = cmd.Wait()
			if s := strings.TrimSpace(stderr.String()); s != "" {
				t.Logf("child consumer's stderr: %s", s)
			}
		})
	}
	t.Cleanup(kill)
	return kill
}

// fmRun runs one cell and judges it.
func fmRun(t *testing.T, path fmPath, ev string, note func(string)) fmVerdict {
	fatalf := func(format string, args ...any) {
		t.Helper()
		note(fmt.Sprintf(format, args...))
		t.Fatalf(format, args...)
	}
	s := fmSpecOf(path, ev)
	p := s.policy
	ctx := testenv.Context(t, 3*time.Minute)
	setup := testenv.Broker(t, mq.Config{Logger: testenv.Discard()})
	q := testenv.Name(t)
	testenv.CleanupDerived(t, q, p)
	dlq, parked := topology.DeadLetterQueue(q), topology.ParkedQueue(q)
	var rungs []string
	for _, w := range p.BrokerRungs() {
		rungs = append(rungs, topology.Rung(q, p, w).Name)
	}
	lg := testenv.NewLogRecorder(t, mq.EventRequeued, mq.EventSetAsideFailed, "acemq.message.rejected")
	r := newFmRec(0)
	hit := make(chan struct{})
	var hitOnce sync.Once
	r.onHit = func() { hitOnce.Do(func() { close(hit) }) }
	until := ""
	switch ev {
	case evStop:
		until = "drain"
	case evCut:
		until = "ctx"
	}
	if path.name == fmPathCarried.name {
		until = "drain"
	}
	trig := s.trigger(until)
	if ev != evStop && ev != evCut && path.name != fmPathCarried.name {
		trig = nil
	}

	// The queues. The home queue is a quorum queue (its x-delivery-count
	// is the quorum column's). A cell whose target refuses or is missing
	// declares the failure half itself and consumes WithoutDeclare.
	env := fmEnv{manual: ev == evRefuse || ev == evMissing || ev == evDLQ}
	var cb *mq.Broker
	var proxy interface{ Cut() int }
	cfg := mq.Config{Logger: lg.Logger(), Heartbeat: 2 * time.Second}
	if ev == evCut || ev == evAckLost {
		px, u := testenv.Proxy(t)
		cfg.URLs, proxy = []string{u}, px
	}
	if ev == evAckLost {
		env.cut = func() { proxy.Cut() }
	}
	cfg.Hooks = []any{r}
	cb = testenv.Broker(t, cfg)
	home := []topology.QueueOption{}
	decl := setup
	if s.declared {
		home, decl = append(home, topology.Retry(p)), cb
	}
	if ev == evInOrder {
		// A classic queue keeps a returned message in its place on every
		// version; a quorum queue of 3.10 puts it behind what was
		// published meanwhile, which would hide a copy sent to the tail.
		home = append(home, topology.Classic())
	}
	if err := decl.Declare(ctx, topology.New().Queue(q, home...)); err != nil {
		fatalf("declare %s: %v", q, err)
	}
	var target string
	switch {
	case ev == evDLQ:
		target = dlq
	case path.target == "dlq":
		target = dlq
	case path.target == "parked":
		target = parked
	case path.target == "rung" && len(rungs) > 0:
		target = rungs[0]
	}
	ch, err := setup.Channel(ctx)
	if err != nil {
		fatalf("%v", err)
	}
	defer ch.Close()
	plain := topology.ForConsumer(q, p)
	if env.manual {
		if err := setup.Declare(ctx, plain); err != nil {
			fatalf("declare the failure half: %v", err)
		}
		if _, err := ch.QueueDelete(target, false, false, false); err != nil {
			fatalf("delete %s: %v", target, err)
		}
		if ev != evMissing {
			qd, _ := plain.QueueNamed(target)
			args := amqp.Table{"x-max-length": int32(0), "x-overflow": "reject-publish"}
			for k, v := range qd.Args {
				args[k] = v
			}
			if _, err := ch.QueueDeclare(target, true, false, false, false, args); err != nil {
				fatalf("declare %s refusing: %v", target, err)
			}
		}
	}
	repair := func() {
		if _, err := ch.QueueDelete(target, false, false, false); err != nil {
			fatalf("delete %s: %v", target, err)
		}
		qd, _ := plain.QueueNamed(target)
		if _, err := ch.QueueDeclare(target, true, false, false, false, qd.Args); err != nil {
			fatalf("declare %s: %v", target, err)
		}
	}
	if path.name == fmPathInbox.name {
		env.db = outboxOpen(t, outboxURL())
		env.schema = outboxTables(t, env.db)
	}

	// Publish, consume, and hit.
	msgs := make([]mq.Message, len(s.ids))
	for i, id := range s.ids {
		msgs[i] = mq.Message{MessageId: id, Body: []byte(id)}
	}
	dup := path.name == fmPathInbox.name // the duplicate comes once the original is acknowledged
	if dup {
		msgs = msgs[:1]
	}
	testenv.Publish(t, setup, q, msgs...)
	var consumers []*mq.Consumer
	consume := func(tr *fmTrigger) {
		t.Helper()
		c, err := fmConsume(ctx, cb, q, s, r, env, tr)
		if err != nil {
			fatalf("consume: %v", err)
		}
		consumers = append(consumers, c)
	}
	var kill func()
	if ev == evKill {
		a := fmChildArgs{Path: path.name, Event: ev, Queue: q, URL: testenv.URL(), Schema: env.schema, Manual: env.manual}
		if env.db != nil {
			a.DB = outboxURL()
		}
		kill = fmStartChild(t, a, r, r.onHit)
	} else {
		consume(trig)
	}
	if path.name == fmPathReplay.name {
		if !testenv.Poll(30*time.Second, func() bool { return fmReady(ctx, setup, dlq) >= 1 }) {
			fatalf("the message never reached %s before its replay", dlq)
		}
		// The original's ack follows its confirmed hop by up to 250 ms
		// (mq's ack batching). A cut inside that window redelivers the
		// original, which the consumer acknowledges with the fate it
		// carried out: the ack-lost column of the dlq row. This row's
		// events are for the replay's copy, so it starts once the
		// original's ack has gone out.
		time.Sleep(400 * time.Millisecond)
		if _, err := ops.Replay(ctx, setup, dlq, ops.ReplayOptions{}); err != nil {
			fatalf("replay: %v", err)
		}
	}
	waitHit := func() {
		t.Helper()
		select {
		case <-hit:
		case <-time.After(60 * time.Second):
			fatalf("the path never reached attempt %d of %s within 60 s", path.trigAt, s.subject)
		}
		if path.trigAfter {
			time.Sleep(150 * time.Millisecond) // into the wait or pause that follows
		}
	}
	switch {
	case path.name == fmPathCarried.name || ev == evStop:
		waitHit()
		r.mark()
		testenv.Stop(t, consumers[len(consumers)-1])
		consume(nil)
	case ev == evKill:
		waitHit()
		r.mark()
		kill()
		consume(nil)
	case ev == evCut:
		waitHit()
		r.mark()
		proxy.Cut()
	case ev == evRefuse || ev == evMissing:
		time.Sleep(1500 * time.Millisecond) // refused or unroutable meanwhile
		repair()
	case ev == evDLQ:
		// Refused set-asides, then a restart, then more of them.
		if !testenv.Poll(30*time.Second, func() bool { return lg.Count(mq.EventSetAsideFailed) >= 2 }) {
			t.Logf("only %d refused set-asides in 30 s before the restart", lg.Count(mq.EventSetAsideFailed))
		}
		r.mark()
		testenv.Stop(t, consumers[len(consumers)-1])
		consume(nil)
		time.Sleep(time.Second)
		repair()
	}

	// Wait until every copy has met its fate, and a little longer for
	// what should not come (a second copy, a further call).
	window := 30 * time.Second
	settledN := func(n int) func() bool {
		return func() bool {
			acked := 0
			for _, d := range r.snapshotDels() {
				if d.HookOut == string(mq.OutcomeAck) {
					acked++
				}
			}
			return acked+fmReady(ctx, setup, dlq)+fmReady(ctx, setup, parked) >= n
		}
	}
	if dup {
		if !testenv.Poll(window, settledN(1)) {
			fatalf("the original never met its fate within %v", window)
		}
		testenv.Publish(t, setup, q, mq.Message{MessageId: s.subject, Body: []byte(s.subject)})
	}
	settled := settledN(len(s.ids))
	if !testenv.Poll(window, settled) {
		t.Logf("not every copy met its fate within %v", window)
	}
	time.Sleep(500 * time.Millisecond)
	for _, c := range consumers {
		testenv.Stop(t, c)
	}
	time.Sleep(200 * time.Millisecond) // a return reaches the count a moment later

	found := map[string]map[string]int{} // id → place → copies
	add := func(where string, ds []amqp.Delivery) {
		for _, d := range ds {
			if found[d.MessageId] == nil {
				found[d.MessageId] = map[string]int{}
			}
			found[d.MessageId][where]++
		}
	}
	add("queue", fmGetAll(t, setup, q))
	add(string(placeDLQ), fmGetAll(t, setup, dlq))
	add(string(placeParked), fmGetAll(t, setup, parked))
	for _, rq := range rungs {
		add("rung", fmGetAll(t, setup, rq))
	}
	for _, d := range r.snapshotDels() {
		if d.HookOut == string(mq.OutcomeAck) {
			if found[d.ID] == nil {
				found[d.ID] = map[string]int{}
			}
			found[d.ID][string(placeAcked)]++
		}
	}
	r.mu.Lock()
	calls, dels, marks := slices.Clone(r.calls), slices.Clone(r.dels), slices.Clone(r.marks)
	r.mu.Unlock()
	v := fmJudge(s, calls, dels, marks, found)
	t.Logf("calls: %s", fmCallsString(calls))
	t.Logf("deliveries: %+v", dels)
	t.Logf("places: %v; events: %s", found, lg.Events())
	return v
}

func (r *fmRec) snapshotDels() []fmDelivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.dels)
}

// fmReady is the ready count of q, 0 when it does not exist.
func fmReady(ctx context.Context, b *mq.Broker, q string) int {
	n, err := testenv.Ready(ctx, b, q)
	if err != nil {
		return 0
	}
	return n
}

// fmGetAll takes everything in q, nothing when q does not exist.
func fmGetAll(t *testing.T, b *mq.Broker, q string) []amqp.Delivery {
	t.Helper()
	ok, err := b.QueueExists(testenv.Context(t, 15*time.Second), q)
	if err != nil || !ok {
		return nil
	}
	return testenv.GetAll(t, b, q)
}

func fmCallsString(calls []fmCall) string {
	var parts []string
	for _, c := range calls {
		p := fmt.Sprintf("%s@%d", c.ID, c.Attempt)
		if c.Replayed {
			p += "r"
		}
		if c.Interrupted {
			p += "(cut)"
		}
		p += fmt.Sprintf("[p%d %s]", c.Proc, c.Start.Format("05.000"))
		parts = append(parts, p)
	}
	return strings.Join(parts, " ")
}

// fmCheck is one invariant's verdict in one cell.
type fmCheck struct {
	name   string
	status string // "ok", "n/a", "FAILED"
	detail string
}

// fmVerdict is a cell's invariants.
type fmVerdict []fmCheck

func (v fmVerdict) failed() bool {
	for _, c := range v {
		if c.status == "FAILED" {
			return true
		}
	}
	return false
}

func (v fmVerdict) String() string {
	parts := make([]string, len(v))
	for i, c := range v {
		parts[i] = c.name + " " + c.status
		if c.detail != "" {
			parts[i] += " (" + c.detail + ")"
		}
	}
	return strings.Join(parts, ", ")
}

func fmCheckOf(name string, problems []string, applies bool, why string) fmCheck {
	switch {
	case !applies:
		return fmCheck{name: name, status: "n/a", detail: why}
	case len(problems) > 0:
		return fmCheck{name: name, status: "FAILED", detail: strings.Join(problems, "; ")}
	}
	return fmCheck{name: name, status: "ok"}
}

// fmJudge checks the invariants over what a cell recorded.
func fmJudge(s fmSpec, calls []fmCall, dels []fmDelivery, marks []time.Time, found map[string]map[string]int) fmVerdict {
	p := s.policy
	N := p.Attempts()
	sort.SliceStable(calls, func(i, j int) bool { return calls[i].Start.Before(calls[j].Start) })
	markBetween := func(a, b time.Time) bool {
		for _, m := range marks {
			if !m.Before(a) && !m.After(b) {
				return true
			}
		}
		return false
	}
	// Per life: a message's calls before a replay, and after.
	type life struct {
		id       string
		replayed bool
	}
	lives := map[life][]fmCall{}
	var order []life
	for _, c := range calls {
		l := life{c.ID, c.Replayed}
		if _, ok := lives[l]; !ok {
			order = append(order, l)
		}
		lives[l] = append(lives[l], c)
	}
	var over, gaps, waits []string
	for _, l := range order {
		cs := lives[l]
		seq := fmAttempts(cs)
		name := l.id
		if l.replayed {
			name += " replayed"
		}
		forgotten, completed, maxA := 0, 0, 0
		decided := 0 // the attempt that decided the fate (reject, park, the last failure)
		for i, c := range cs {
			maxA = max(maxA, c.Attempt)
			if decided > 0 {
				over = append(over, fmt.Sprintf("%s called again at attempt %d after attempt %d decided its fate", name, c.Attempt, decided))
				decided = -1
			}
			if !c.Interrupted && decided == 0 && (c.Step == stepReject || c.Step == stepPark || c.Step == stepFail && c.Attempt >= N) {
				decided = c.Attempt
			}
			if !c.Interrupted {
				completed++
			}
			if i == 0 {
				if c.Attempt != 1 {
					gaps = append(gaps, fmt.Sprintf("%s ran %s: first attempt %d", name, seq, c.Attempt))
				}
				continue
			}
			prev := cs[i-1]
			switch {
			case c.Attempt == prev.Attempt+1:
			case c.Attempt == prev.Attempt && prev.Interrupted:
			case s.forgets && markBetween(prev.End, c.Start) && c.Attempt >= 1 && c.Attempt <= prev.Attempt+1:
				forgotten += prev.Attempt + 1 - c.Attempt
			default:
				gaps = append(gaps, fmt.Sprintf("%s ran %s", name, seq))
			}
			if prev.Step == stepFail && !prev.Interrupted && !markBetween(prev.End, c.Start) && c.Attempt == prev.Attempt+1 {
				want := p.After(prev.Attempt).Wait
				if got := c.Start.Sub(prev.End); got < want*9/10-20*time.Millisecond {
					waits = append(waits, fmt.Sprintf("%s attempt %d came %v after attempt %d, whose wait is %v",
						name, c.Attempt, got.Round(time.Millisecond), prev.Attempt, want))
				}
			}
		}
		if maxA > N || completed-forgotten > N {
			over = append(over, fmt.Sprintf("%s ran %s under a %d-attempt policy", name, seq, N))
		}
	}

	// Every copy somewhere; each once, where its path leads.
	pub := map[string]int{}
	for _, id := range s.ids {
		pub[id]++
	}
	var lost, fate []string
	ids := make([]string, 0, len(pub))
	for id := range pub {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		total := 0
		for _, n := range found[id] {
			total += n
		}
		if total < pub[id] {
			lost = append(lost, fmt.Sprintf("%s: %d of %d copies found (%v)", id, total, pub[id], found[id]))
		}
		want := placeAcked
		if id == s.subject {
			want = s.place
		}
		if total != pub[id] || found[id][string(want)] != pub[id] {
			fate = append(fate, fmt.Sprintf("%s: %v, want %d %s", id, found[id], pub[id], want))
		}
	}

	// Order: under InOrder, what is handled straight is handled in the
	// queue's order (a message that went through a rung, .dlq or .parked
	// left its place by design).
	orderApplies, orderWhy := s.ev == evInOrder, ""
	switch {
	case !orderApplies:
	case s.path.name == fmPathRung.name:
		orderApplies, orderWhy = false, "broker rungs reorder whatever the option, mq.InOrder says"
	case s.path.name == fmPathRequeue.name:
		orderApplies, orderWhy = false, "a requeue goes back behind the window already delivered; mq.InOrder promises order through waits"
	}
	var disorder []string
	if orderApplies {
		straight := s.place == placeAcked && s.path.name != fmPathReplay.name
		var want, got []string
		for _, id := range s.ids {
			if id != s.subject || straight {
				want = append(want, id)
			}
		}
		seen := map[string]bool{}
		for _, c := range calls {
			if c.Step == stepOK && !c.Interrupted && !seen[c.ID] && (c.ID != s.subject || straight) {
				seen[c.ID] = true
				got = append(got, c.ID)
			}
		}
		if !slices.Equal(want, got) {
			disorder = append(disorder, fmt.Sprintf("handled %v, want %v", got, want))
		}
	}

	// The outer middleware: every delivery once, with what was carried out.
	var outer []string
	missed := 0
	for _, d := range dels {
		switch {
		case d.Outer == 0:
			missed++
		case d.Outer > 1:
			outer = append(outer, fmt.Sprintf("a delivery of %s passed it %d times", d.ID, d.Outer))
		case d.HookOut == "":
			outer = append(outer, fmt.Sprintf("a delivery of %s was settled with no outcome", d.ID))
		case d.Panicked: // nothing returned to it: there was no outcome to read
		case d.OuterOut == "" || d.OuterOut != d.HookOut:
			outer = append(outer, fmt.Sprintf("%s: it read outcome %q, the library carried out %q", d.ID, d.OuterOut, d.HookOut))
		}
	}
	if missed > 0 {
		outer = append([]string{fmt.Sprintf("saw %d of %d deliveries", len(dels)-missed, len(dels))}, outer...)
	}

	return fmVerdict{
		fmCheckOf(fmt.Sprintf("attempts≤%d", N), over, true, ""),
		fmCheckOf("no gap", gaps, true, ""),
		fmCheckOf("waits", waits, true, ""),
		fmCheckOf("none lost", lost, true, ""),
		fmCheckOf("one fate", fate, true, ""),
		fmCheckOf("order", disorder, orderApplies, orderWhy),
		fmCheckOf("outer-once", outer, true, ""),
	}
}

// fmAttempts is a life's attempts, "1 2 2(cut) 3".
func fmAttempts(cs []fmCall) string {
	parts := make([]string, len(cs))
	for i, c := range cs {
		parts[i] = fmt.Sprint(c.Attempt)
		if c.Interrupted {
			parts[i] += "(cut)"
		}
	}
	return strings.Join(parts, " ")
}
