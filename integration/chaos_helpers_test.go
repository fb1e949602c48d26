//go:build chaos

package integration

// The fault suite of issue 7 (`make chaos`): real faults against the local
// broker, every message counted. These files build with the chaos tag alone
// (they lean on nothing in the integration-tagged files, whose helpers other
// suites own) and alongside them (`-tags 'integration chaos'`, as `make
// chaos` runs them): every name here starts with chaos.
//
// The broker is shared with other users, so no test here stops, restarts or
// resets it. Connections are cut with a TCP proxy of the test's own; the
// broker's own connection.close is sent to the test's own connections only,
// found by their unique connection name; the one broker-wide fault, the
// memory alarm, is held for a few seconds and always undone.
//
// Every scenario reports, in its log and as one line on stdout:
//
//	CHAOS <scenario>: published=N confirmed=N handled=N distinct=N duplicates=N lost=0 …
//
// published: Publish calls; confirmed: those that returned nil; handled:
// handler calls that returned nil (every one, duplicates included);
// distinct: the message ids among them; duplicates: handled - distinct (at
// least once: allowed, and reported); lost: confirmed messages that were
// never handled nor are anywhere the scenario accounts for (must be 0).

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/acemq/acemq-go/internal/tcpproxy"
	"github.com/acemq/acemq-go/internal/testenv"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/retry"
	"github.com/acemq/acemq-go/topology"
)

// chaosNoLeaks checks, when the test ends (after every other cleanup:
// brokers closed, proxies closed, queues deleted), that the goroutines are
// back to what they were when it started. goleak retries for a while before
// it fails, which is the settle time for goroutines that are on their way
// out. Call it first thing in a scenario, so its cleanup runs last.
func chaosNoLeaks(t *testing.T) {
	t.Helper()
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() {
		start, failed := time.Now(), t.Failed()
		goleak.VerifyNone(t, ignore)
		if t.Failed() == failed {
			t.Logf("goroutines back to baseline (checked in %v)", time.Since(start).Round(time.Millisecond))
		}
	})
}

// chaosName is a connection name unique to this test run, so the broker's
// connection list tells our connections from everybody else's.
func chaosName(t *testing.T, role string) string { return testenv.Name(t, role) }

// chaosBroker starts a broker for the test (closed when it ends) logging to
// lg, under a connection name of its own; url "" is the broker itself.
func chaosBroker(t *testing.T, lg *chaosLog, name, url string) *mq.Broker {
	t.Helper()
	cfg := mq.Config{ConnectionName: name, Heartbeat: 2 * time.Second,
		ReconnectMin: 20 * time.Millisecond, ReconnectMax: 500 * time.Millisecond}
	if url != "" {
		cfg.URLs = []string{url}
	}
	if lg != nil {
		cfg.Logger = lg.logger()
	} else {
		cfg.Logger = testenv.Discard()
	}
	return testenv.Broker(t, cfg)
}

// chaosProxy starts a TCP proxy in front of the test broker (closed when
// the test ends) and returns it with the AMQP URL through it.
func chaosProxy(t *testing.T) (*tcpproxy.Proxy, string) {
	t.Helper()
	u, err := url.Parse(testenv.URL())
	if err != nil {
		t.Fatalf("AMQP_URL: %v", err)
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), "5672")
	}
	p, err := tcpproxy.Start(host)
	if err != nil {
		t.Fatalf("start proxy: %v", err)
	}
	t.Cleanup(p.Close)
	u.Host = p.Addr()
	return p, u.String()
}

// chaosQueue declares a goit.* queue (quorum, the default) and deletes it
// when the test ends, with every queue the consumer derives from it for p:
// .dlq, .parked and p's retry rungs.
func chaosQueue(t *testing.T, b *mq.Broker, p retry.Policy) string {
	t.Helper()
	q := testenv.Name(t)
	qs := []string{q, topology.DeadLetterQueue(q), topology.ParkedQueue(q)}
	for _, r := range p.BrokerRungs() {
		qs = append(qs, topology.RetryQueue(q, r))
	}
	testenv.Cleanup(t, qs...)
	if err := b.Declare(testenv.Context(t, 15*time.Second), topology.New().Queue(q)); err != nil {
		t.Fatalf("declare %s: %v", q, err)
	}
	return q
}

// chaosCount is the number of ready messages in q, or a failed test.
func chaosCount(t *testing.T, b *mq.Broker, q string) int {
	t.Helper()
	n, err := b.MessageCount(testenv.Context(t, 15*time.Second), q)
	if err != nil {
		t.Fatalf("count %s: %v", q, err)
	}
	return n
}

// chaosTake takes every message ready in q (basic.get with ack, on a
// channel of its own) and returns their ids and headers.
func chaosTake(t *testing.T, b *mq.Broker, q string) []chaosTaken {
	t.Helper()
	ch, err := b.Channel(testenv.Context(t, 15*time.Second))
	if err != nil {
		t.Fatalf("channel: %v", err)
	}
	defer ch.Close()
	var out []chaosTaken
	for {
		d, ok, err := ch.Get(q, true)
		if err != nil {
			t.Fatalf("get from %s: %v", q, err)
		}
		if !ok {
			return out
		}
		out = append(out, chaosTaken{id: d.MessageId, headers: d.Headers})
	}
}

type chaosTaken struct {
	id      string
	headers map[string]any
}

// chaosStop stops c within d and fails the test if it does not drain.
func chaosStop(t *testing.T, c *mq.Consumer, d time.Duration) {
	t.Helper()
	if err := c.Stop(testenv.Context(t, d)); err != nil {
		t.Errorf("stop consumer of %s: %v", c.Queue(), err)
	}
}

// chaosEventually polls cond every 20 ms until it holds or d passes, and
// reports whether it held: the caller decides how bad it is.
func chaosEventually(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// chaosWait waits for wg at most d; false if it had not finished by then.
func chaosWait(wg *sync.WaitGroup, d time.Duration) bool {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

// chaosLedger counts one scenario's messages.
type chaosLedger struct {
	scenario string

	mu        sync.Mutex
	published int
	confirmed map[string]bool
	failures  map[string]int // publish error text → how many
	handled   map[string]int // id → handler calls that returned nil
	calls     int            // handler calls, failed ones included
}

func newChaosLedger(scenario string) *chaosLedger {
	return &chaosLedger{scenario: scenario, confirmed: map[string]bool{}, failures: map[string]int{}, handled: map[string]int{}}
}

// publish publishes one message with id through pub and records the
// outcome.
func (l *chaosLedger) publish(ctx context.Context, pub *mq.Publisher, key, id string) error {
	l.mu.Lock()
	l.published++
	l.mu.Unlock()
	err := pub.Publish(ctx, key, mq.Message{MessageID: id, Body: []byte(`{"chaos":"` + id + `"}`), ContentType: "application/json"})
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.failures[err.Error()]++
		return err
	}
	l.confirmed[id] = true
	return nil
}

// call records that the handler was called (whatever it returns).
func (l *chaosLedger) call() {
	l.mu.Lock()
	l.calls++
	l.mu.Unlock()
}

// done records that the handler returned nil for id.
func (l *chaosLedger) done(id string) {
	l.mu.Lock()
	l.handled[id]++
	l.mu.Unlock()
}

// distinct is how many ids were handled.
func (l *chaosLedger) distinct() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.handled)
}

// allHandled reports whether every confirmed message was handled.
func (l *chaosLedger) allHandled() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for id := range l.confirmed {
		if l.handled[id] == 0 {
			return false
		}
	}
	return true
}

func (l *chaosLedger) wasHandled(id string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.handled[id] > 0
}

func (l *chaosLedger) failureCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, c := range l.failures {
		n += c
	}
	return n
}

// counts is the ledger's numbers now.
type chaosCounts struct {
	published, confirmed, failed, handled, distinct, duplicates, calls int
	unconfirmedHandled                                                 int // handled though their publish failed
}

func (l *chaosLedger) counts() chaosCounts {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := chaosCounts{published: l.published, confirmed: len(l.confirmed), distinct: len(l.handled), calls: l.calls}
	for _, n := range l.failures {
		c.failed += n
	}
	for id, n := range l.handled {
		c.handled += n
		if !l.confirmed[id] {
			c.unconfirmedHandled++
		}
	}
	c.duplicates = c.handled - c.distinct
	return c
}

// report works out what was lost — confirmed, never handled, and not
// accounted for by elsewhere (a dead-letter queue, the source queue after a
// stop; nil: nowhere) — fails the test for each, logs the counts, and prints
// the scenario's CHAOS line with extra appended.
func (l *chaosLedger) report(t *testing.T, elsewhere func(id string) bool, extra string) chaosCounts {
	t.Helper()
	c := l.counts()
	l.mu.Lock()
	var lost []string
	for id := range l.confirmed {
		if l.handled[id] == 0 && (elsewhere == nil || !elsewhere(id)) {
			lost = append(lost, id)
		}
	}
	failures := make([]string, 0, len(l.failures))
	for e, n := range l.failures {
		failures = append(failures, fmt.Sprintf("%dx %s", n, e))
	}
	l.mu.Unlock()
	sort.Strings(lost)
	sort.Strings(failures)
	if len(lost) > 0 {
		t.Errorf("%s: %d confirmed messages lost (never handled, not set aside, not in the queue), e.g. %v", l.scenario, len(lost), lost[:min(10, len(lost))])
	}
	for _, f := range failures {
		t.Logf("%s: publish failed: %s", l.scenario, f)
	}
	line := fmt.Sprintf("CHAOS %s: published=%d confirmed=%d handled=%d distinct=%d duplicates=%d lost=%d",
		l.scenario, c.published, c.confirmed, c.handled, c.distinct, c.duplicates, len(lost))
	if c.calls != c.handled {
		line += fmt.Sprintf(" calls=%d", c.calls)
	}
	if c.failed > 0 {
		line += fmt.Sprintf(" publish_failed=%d", c.failed)
	}
	if c.unconfirmedHandled > 0 {
		line += fmt.Sprintf(" handled_unconfirmed=%d", c.unconfirmedHandled)
	}
	if extra != "" {
		line += " " + extra
	}
	if t.Failed() {
		line += " FAILED"
	}
	t.Log(line)
	fmt.Println(line)
	chaosSummary.add(line)
	return c
}

// chaosSummary collects the CHAOS lines of the run, printed together by
// TestChaosZZSummary.
var chaosSummary chaosLines

type chaosLines struct {
	mu    sync.Mutex
	lines []string
}

func (s *chaosLines) add(line string) {
	s.mu.Lock()
	s.lines = append(s.lines, line)
	s.mu.Unlock()
}

func (s *chaosLines) all() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.lines)
}

// chaosRecord is one log record as chaosLog kept it, its attributes
// (Logger.With ones included) flattened to strings.
type chaosRecord struct {
	at    time.Time
	level slog.Level
	msg   string
	attrs map[string]string
}

func (r chaosRecord) String() string {
	keys := make([]string, 0, len(r.attrs))
	for k := range r.attrs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", r.level, r.msg)
	for _, k := range keys {
		fmt.Fprintf(&b, " %s=%q", k, r.attrs[k])
	}
	return b.String()
}

// chaosLog is a slog.Handler that keeps every record, so a scenario can
// count the library's events, and passes the interesting ones to the test
// log: warnings and errors, and the connection's and consumer's own info
// records, but not one line per message (acemq.message.settled) nor a
// stack per panic.
type chaosLog struct {
	store *chaosStore
	pre   []slog.Attr
}

type chaosStore struct {
	t       *testing.T
	mu      sync.Mutex
	records []chaosRecord
	quiet   map[string]bool
}

func newChaosLog(t *testing.T) *chaosLog {
	return &chaosLog{store: &chaosStore{t: t, quiet: map[string]bool{
		"acemq.message.settled": true, "acemq.handler.panic": true, "acemq.settle.skipped": true,
	}}}
}

func (h *chaosLog) logger() *slog.Logger { return slog.New(h) }

func (h *chaosLog) Enabled(context.Context, slog.Level) bool { return true }

func (h *chaosLog) Handle(_ context.Context, r slog.Record) error {
	rec := chaosRecord{at: r.Time, level: r.Level, msg: r.Message, attrs: map[string]string{}}
	for _, a := range h.pre {
		rec.attrs[a.Key] = a.Value.String()
	}
	r.Attrs(func(a slog.Attr) bool {
		rec.attrs[a.Key] = a.Value.String()
		return true
	})
	h.store.mu.Lock()
	h.store.records = append(h.store.records, rec)
	quiet := h.store.quiet[rec.msg]
	h.store.mu.Unlock()
	if !quiet && r.Level >= slog.LevelInfo {
		h.store.t.Log(rec.at.Format("15:04:05.000"), rec.String())
	}
	return nil
}

func (h *chaosLog) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.pre = append(slices.Clone(h.pre), as...)
	return &c
}

func (h *chaosLog) WithGroup(string) slog.Handler { return h }

// all returns the records whose message is msg ("" for every record).
func (h *chaosLog) all(msg string) []chaosRecord {
	h.store.mu.Lock()
	defer h.store.mu.Unlock()
	var out []chaosRecord
	for _, r := range h.store.records {
		if msg == "" || r.msg == msg {
			out = append(out, r)
		}
	}
	return out
}

func (h *chaosLog) count(msg string) int { return len(h.all(msg)) }

// containing returns the records whose message or any attribute contains s.
func (h *chaosLog) containing(s string) []chaosRecord {
	var out []chaosRecord
	for _, r := range h.all("") {
		hit := strings.Contains(r.msg, s)
		for _, v := range r.attrs {
			hit = hit || strings.Contains(v, s)
		}
		if hit {
			out = append(out, r)
		}
	}
	return out
}

// events is how many records of each message were logged, "msg=n ...",
// for the scenario's report.
func (h *chaosLog) events() string {
	n := map[string]int{}
	for _, r := range h.all("") {
		n[r.msg]++
	}
	keys := make([]string, 0, len(n))
	for k := range n {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%d", k, n[k]))
	}
	return strings.Join(parts, " ")
}

// chaosNoBadSettlement fails t if a channel died of an acknowledgement sent
// on a channel the delivery did not come on (406 PRECONDITION_FAILED
// "unknown delivery tag"), or if any message was rejected by the runtime.
func chaosNoBadSettlement(t *testing.T, lg *chaosLog) {
	t.Helper()
	for _, s := range []string{"PRECONDITION_FAILED", "unknown delivery tag"} {
		for _, r := range lg.containing(s) {
			t.Errorf("a record mentions %q: %v", s, r)
		}
	}
	if n := lg.count("acemq.message.rejected"); n != 0 {
		t.Errorf("%d messages rejected by the runtime: %v", n, lg.all("acemq.message.rejected")[0])
	}
}
