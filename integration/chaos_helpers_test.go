//go:build chaos

package integration

// The fault suite of issue 7 (`make chaos`): real faults against the local
// broker, every message counted. These files build with the chaos tag alone
// (they lean on nothing in the integration-tagged files, whose helpers other
// suites own; what every suite shares is in internal/testenv) and alongside
// them (`-tags 'integration chaos'`, as `make chaos` runs them): every name
// here starts with chaos.
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
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/acemq/acemq-go/internal/testenv"
	"github.com/acemq/acemq-go/mq"
)

// chaosBroker starts a broker for the test (closed when it ends) logging to
// lg, under a connection name of its own; url "" is the broker itself.
func chaosBroker(t *testing.T, lg *testenv.LogRecorder, name, url string) *mq.Broker {
	t.Helper()
	cfg := mq.Config{ConnectionName: name, Heartbeat: 2 * time.Second,
		ReconnectMin: 20 * time.Millisecond, ReconnectMax: 500 * time.Millisecond}
	if url != "" {
		cfg.URLs = []string{url}
	}
	if lg != nil {
		cfg.Logger = lg.Logger()
	} else {
		cfg.Logger = testenv.Discard()
	}
	return testenv.Broker(t, cfg)
}

// chaosConsume starts a consumer of q on b with handler h and opts, or
// fails the test.
func chaosConsume(t *testing.T, ctx context.Context, b *mq.Broker, q string, h mq.Handler, opts ...mq.ConsumerOption) *mq.Consumer {
	t.Helper()
	c, err := b.Consume(ctx, q, h, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// newChaosLog returns the log recorder of a scenario: it keeps every record,
// so the scenario can count the library's events, and passes the
// interesting ones to the test log: warnings and errors, and the
// connection's and consumer's own info records, but not one line per
// message (acemq.message.settled) nor a stack per panic.
func newChaosLog(t *testing.T) *testenv.LogRecorder {
	return testenv.NewLogRecorder(t, "acemq.message.settled", "acemq.handler.panic", "acemq.settle.skipped")
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
	return l.publishMessage(ctx, pub, key, mq.Message{MessageId: id, Body: []byte(`{"chaos":"` + id + `"}`), ContentType: "application/json"})
}

// publishMessage publishes m through pub and records the outcome under
// m.MessageId.
func (l *chaosLedger) publishMessage(ctx context.Context, pub *mq.Publisher, key string, m mq.Message) error {
	l.sent()
	err := pub.Publish(ctx, key, m)
	l.record(m.MessageId, err)
	return err
}

// sent records that a message was published (confirmed or not).
func (l *chaosLedger) sent() {
	l.mu.Lock()
	l.published++
	l.mu.Unlock()
}

// record records how the publish of id ended: confirmed (err nil) or
// failed with err.
func (l *chaosLedger) record(id string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.failures[err.Error()]++
		return
	}
	l.confirmed[id] = true
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

// handler returns a handler that records each call and, once work (nil:
// none) has returned nil, the message as handled; work's error is the
// handler's.
func (l *chaosLedger) handler(work func(context.Context) error) mq.HandlerFunc {
	return func(ctx context.Context, d *mq.Delivery) error {
		l.call()
		if work != nil {
			if err := work(ctx); err != nil {
				return err
			}
		}
		l.done(d.MessageId)
		return nil
	}
}

// chaosBusy is up to 2 ms of work that ends early with ctx: a little, so
// deliveries are in flight when a fault comes.
func chaosBusy(ctx context.Context) error {
	select {
	case <-time.After(time.Duration(rand.N(2000)) * time.Microsecond):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// paced publishes total messages prefix-00000 … to key through pub from
// publishers goroutines, message i at start + i/total of spread, each with
// 60 s to be confirmed, and records the outcomes. It returns at once, with
// the start and the goroutines to wait for.
func (l *chaosLedger) paced(ctx context.Context, pub *mq.Publisher, key, prefix string, total, publishers int, spread time.Duration) (time.Time, *sync.WaitGroup) {
	start := time.Now()
	wg := &sync.WaitGroup{}
	for w := range publishers {
		wg.Go(func() {
			for i := w; i < total; i += publishers {
				if d := time.Until(start.Add(spread * time.Duration(i) / time.Duration(total))); d > 0 {
					time.Sleep(d)
				}
				pctx, cancel := context.WithTimeout(ctx, 60*time.Second)
				_ = l.publish(pctx, pub, key, fmt.Sprintf("%s-%05d", prefix, i))
				cancel()
			}
		})
	}
	return start, wg
}

// settle waits up to 60 s for every confirmed message to be handled, then
// up to 20 s for q (counted on direct) to empty: redeliveries of messages
// whose acknowledgement died with a fault may still be coming. It fails the
// test for each that does not happen.
func (l *chaosLedger) settle(t *testing.T, direct *mq.Broker, q string) {
	t.Helper()
	if !testenv.Poll(60*time.Second, l.allHandled) {
		t.Errorf("not every confirmed message was handled within 60 s of the last publish")
	}
	if !testenv.Poll(20*time.Second, func() bool { return testenv.Count(t, direct, q) == 0 }) {
		t.Errorf("%s still holds messages", q)
	}
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

// report checks lg for bad settlements (chaosNoBadSettlement) and logs its
// events, works out what was lost — confirmed, never handled, and not
// accounted for by elsewhere (a dead-letter queue, the source queue after a
// stop; nil: nowhere) — fails the test for each, logs the counts, and prints
// the scenario's CHAOS line with extra appended.
func (l *chaosLedger) report(t *testing.T, lg *testenv.LogRecorder, elsewhere func(id string) bool, extra string) chaosCounts {
	t.Helper()
	chaosNoBadSettlement(t, lg)
	t.Logf("events: %s", lg.Events())
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

// chaosNoBadSettlement fails t if a channel died of an acknowledgement sent
// on a channel the delivery did not come on (406 PRECONDITION_FAILED
// "unknown delivery tag"), or if any message was rejected by the runtime.
func chaosNoBadSettlement(t *testing.T, lg *testenv.LogRecorder) {
	t.Helper()
	for _, s := range []string{"PRECONDITION_FAILED", "unknown delivery tag"} {
		for _, r := range lg.Containing(s) {
			t.Errorf("a record mentions %q: %v", s, r)
		}
	}
	if n := lg.Count("acemq.message.rejected"); n != 0 {
		t.Errorf("%d messages rejected by the runtime: %v", n, lg.All("acemq.message.rejected")[0])
	}
}
