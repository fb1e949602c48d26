//go:build chaos

package integration

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/acemq/acemq-go/internal/testenv"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/topology"
)

// Scenario (issue 21): what the broker forgets, the library declares again.
// Two instances of a service (two Brokers through the test's proxy) each
// hear a fanout exchange on an exclusive queue of their own
// (topology.InstanceQueue); the first also consumes a durable queue bound to
// the same exchange. A third Broker, not through the proxy, publishes to the
// exchange throughout. Meanwhile: five cuts of every proxied connection
// (the broker deletes both exclusive queues each time), one deletion of the
// durable queue under its consumer (on a channel of the test's own, so no
// Broker forgets it), one restart of the second instance's consumer.
//
// Each queue lives in windows: from the start, or from the record that it
// was declared again (acemq.topology.redeclared, written once the queue
// and its bindings are back), to the next cut (exclusive queues) or the
// deletion (the durable one). A message published inside a window of a
// queue and confirmed at least chaosGrace before the window ends must be
// handled by that queue's consumer, or it is lost. A message published
// outside every window was not routed to that queue (gap); one confirmed in
// the last chaosGrace of a window and not handled was in the queue when
// the broker deleted it (gone). Both are the broker's semantics
// (docs/recovery.md) and are counted, not hidden.
func TestChaosRecoveryBroadcastAndDurable(t *testing.T) {
	testenv.NoLeaks(t)
	const (
		total      = 2400
		publishers = 2
		spread     = 12 * time.Second
	)
	ctx := testenv.Context(t, 3*time.Minute)
	proxy, u := testenv.Proxy(t)
	lgA, lgB := newChaosLog(t), newChaosLog(t)
	a := chaosBroker(t, lgA, testenv.Name(t, "a"), u)
	b := chaosBroker(t, lgB, testenv.Name(t, "b"), u)
	direct := chaosBroker(t, nil, testenv.Name(t, "direct"), "")

	ex := testenv.Name(t, "events")
	testenv.CleanupExchanges(t, ex)
	qA := topology.InstanceQueue(testenv.Name(t, "a"))
	qB := topology.InstanceQueue(testenv.Name(t, "b"))
	qD := testenv.Name(t, "work")
	testenv.Cleanup(t, qD) // qA and qB are exclusive: they go with their connections
	if err := a.Declare(ctx, topology.New().Exchange(ex, topology.Fanout).
		Queue(qA, topology.Exclusive()).Binding(qA, ex, "").
		Queue(qD).Binding(qD, ex, "")); err != nil {
		t.Fatal(err)
	}
	if err := b.Declare(ctx, topology.New().Exchange(ex, topology.Fanout).
		Queue(qB, topology.Exclusive()).Binding(qB, ex, "")); err != nil {
		t.Fatal(err)
	}

	rec := newChaosRecovery()
	cA := chaosConsume(t, ctx, a, qA, rec.handler(qA))
	cD := chaosConsume(t, ctx, a, qD, rec.handler(qD), mq.WithConcurrency(4))
	cB := chaosConsume(t, ctx, b, qB, rec.handler(qB))
	defer func() { testenv.Stop(t, cA); testenv.Stop(t, cB); testenv.Stop(t, cD) }() // cB as restarted

	pub := direct.Publisher(ex)
	defer pub.Close()
	start := time.Now()
	var wg sync.WaitGroup
	for w := range publishers {
		wg.Go(func() {
			for i := w; i < total; i += publishers {
				if d := time.Until(start.Add(spread * time.Duration(i) / total)); d > 0 {
					time.Sleep(d)
				}
				pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				rec.publish(pctx, pub, fmt.Sprintf("m-%05d", i))
				cancel()
			}
		})
	}

	// The faults, 1.5 s apart: cut, cut, restart B's consumer, cut, delete
	// the durable queue, cut, cut.
	var deletedAt time.Time
	var cutAt []time.Time
	at := func(k int) { time.Sleep(time.Until(start.Add(time.Duration(k) * 1500 * time.Millisecond))) }
	for k, fault := range []string{"cut", "cut", "restart", "cut", "delete", "cut", "cut"} {
		at(k + 1)
		switch fault {
		case "cut":
			n := proxy.Cut()
			cutAt = append(cutAt, time.Now())
			t.Logf("cut %d: %d connections", len(cutAt), n)
		case "restart":
			testenv.Stop(t, cB)
			time.Sleep(300 * time.Millisecond)
			cB = chaosConsume(t, ctx, b, qB, rec.handler(qB))
			t.Logf("restarted the consumer of %s", qB)
		case "delete":
			testenv.DeleteBehind(t, direct, qD)
			deletedAt = time.Now()
			t.Logf("deleted %s", qD)
		}
	}
	wg.Wait()
	published := time.Since(start)

	// The windows of each queue, from the records of its declaring again.
	windows := map[string][]chaosWindow{}
	var recoveries []time.Duration
	for _, x := range []struct {
		q  string
		lg *testenv.LogRecorder
	}{{qA, lgA}, {qB, lgB}} {
		from := start.Add(-time.Hour)
		for i, cut := range cutAt {
			windows[x.q] = append(windows[x.q], chaosWindow{from, cut})
			back, ok := chaosRedeclaredAfter(x.lg, x.q, cut, 10*time.Second)
			if !ok {
				t.Fatalf("%s was not declared again within 10 s of cut %d; events: %s", x.q, i+1, x.lg.Events())
			}
			recoveries = append(recoveries, back.Sub(cut))
			from = back
		}
		windows[x.q] = append(windows[x.q], chaosWindow{from, start.Add(time.Hour)})
	}
	backD, ok := chaosRedeclaredAfter(lgA, qD, deletedAt, 10*time.Second)
	if !ok {
		t.Fatalf("%s was not declared again within 10 s of its deletion; events: %s", qD, lgA.Events())
	}
	windows[qD] = []chaosWindow{{start.Add(-time.Hour), deletedAt}, {backD, start.Add(time.Hour)}}

	// Wait for every message that must be handled.
	if !testenv.Poll(30*time.Second, func() bool { return len(rec.missing(windows)) == 0 }) {
		t.Errorf("not every message that must be handled was, 30 s after the last publish")
	}
	testenv.Stop(t, cA)
	testenv.Stop(t, cB)
	testenv.Stop(t, cD)
	for _, lg := range []*testenv.LogRecorder{lgA, lgB} {
		chaosNoBadSettlement(t, lg)
	}
	t.Logf("events of a: %s", lgA.Events())
	t.Logf("events of b: %s", lgB.Events())

	lost := rec.missing(windows)
	for q, ids := range lost {
		if len(ids) > 0 {
			sort.Strings(ids)
			t.Errorf("%s: %d messages published while it existed were never handled, e.g. %v", q, len(ids), ids[:min(10, len(ids))])
		}
	}
	s := rec.summary(windows)
	for e, n := range rec.failed {
		t.Logf("publish failed %d times: %s", n, e)
	}
	sort.Slice(recoveries, func(i, j int) bool { return recoveries[i] < recoveries[j] })
	line := fmt.Sprintf("CHAOS recovery: published=%d confirmed=%d handled=%d distinct=%d duplicates=%d lost=%d gap_a=%d gap_b=%d gap_d=%d gone=%d publish_failed=%d cuts=%d deleted=1 restarted=1 redeclared_after_cut_max=%v redeclared_after_delete=%v published_in=%v",
		s.published, s.confirmed, s.handled, s.distinct, s.handled-s.distinct, s.lost,
		s.gap[qA], s.gap[qB], s.gap[qD], s.gone, s.failed, len(cutAt),
		recoveries[len(recoveries)-1].Round(time.Millisecond), backD.Sub(deletedAt).Round(time.Millisecond),
		published.Round(time.Millisecond))
	if t.Failed() {
		line += " FAILED"
	}
	t.Log(line)
	fmt.Println(line)
	chaosSummary.add(line)
}

// chaosGrace: a message confirmed this little before its queue was deleted
// may still be in it, unhandled, when it goes.
const chaosGrace = time.Second

// chaosWindow is a span of time a queue existed in: [from, to).
type chaosWindow struct{ from, to time.Time }

// chaosRedeclaredAfter is when lg first recorded q declared again after
// after, waiting up to d for it.
func chaosRedeclaredAfter(lg *testenv.LogRecorder, q string, after time.Time, d time.Duration) (time.Time, bool) {
	var at time.Time
	ok := testenv.Poll(d, func() bool {
		for _, r := range lg.All(mq.EventTopologyRedeclared) {
			if r.Attrs["queue"] == q && r.Time.After(after) {
				at = r.Time
				return true
			}
		}
		return false
	})
	return at, ok
}

// chaosRecovery is the ledger of the recovery scenario: each publish's
// start and confirm, and what each queue's consumer handled.
type chaosRecovery struct {
	mu        sync.Mutex
	published int
	sentAt    map[string]time.Time
	confirmed map[string]time.Time
	failed    map[string]int            // publish error → how many
	handled   map[string]map[string]int // queue → id → calls that returned nil
}

func newChaosRecovery() *chaosRecovery {
	return &chaosRecovery{sentAt: map[string]time.Time{}, confirmed: map[string]time.Time{}, failed: map[string]int{}, handled: map[string]map[string]int{}}
}

func (r *chaosRecovery) publish(ctx context.Context, pub *mq.Publisher, id string) {
	r.mu.Lock()
	r.published++
	r.sentAt[id] = time.Now()
	r.mu.Unlock()
	err := pub.Publish(ctx, "", mq.Message{MessageId: id, Body: []byte(id)})
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.failed[err.Error()]++ // unroutable: no queue existed at all
		return
	}
	r.confirmed[id] = time.Now()
}

func (r *chaosRecovery) handler(q string) mq.HandlerFunc {
	r.mu.Lock()
	if r.handled[q] == nil {
		r.handled[q] = map[string]int{}
	}
	r.mu.Unlock()
	return func(ctx context.Context, d *mq.Delivery) error {
		r.mu.Lock()
		r.handled[q][d.MessageId]++
		r.mu.Unlock()
		return nil
	}
}

// must says whether a message sent at s and confirmed at f must have been
// handled by a queue that lived in ws, and if not, whether it fell in a gap
// (sent while the queue did not exist) or went with the queue (gone).
func chaosMust(ws []chaosWindow, s, f time.Time) (must, gap bool) {
	for _, w := range ws {
		if !s.Before(w.from) && s.Before(w.to) {
			return f.Before(w.to.Add(-chaosGrace)), false
		}
	}
	return false, true
}

// missing lists, by queue, the confirmed messages that must have been
// handled there and were not.
func (r *chaosRecovery) missing(windows map[string][]chaosWindow) map[string][]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string][]string{}
	for q, ws := range windows {
		for id, f := range r.confirmed {
			if must, _ := chaosMust(ws, r.sentAt[id], f); must && r.handled[q][id] == 0 {
				out[q] = append(out[q], id)
			}
		}
	}
	return out
}

type chaosRecoverySummary struct {
	published, confirmed, failed, handled, distinct, lost, gone int
	gap                                                         map[string]int
}

func (r *chaosRecovery) summary(windows map[string][]chaosWindow) chaosRecoverySummary {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := chaosRecoverySummary{published: r.published, confirmed: len(r.confirmed), gap: map[string]int{}}
	for _, n := range r.failed {
		s.failed += n
	}
	for q, ws := range windows {
		for id, f := range r.confirmed {
			n := r.handled[q][id]
			s.handled += n
			if n > 0 {
				s.distinct++
				continue
			}
			switch must, gap := chaosMust(ws, r.sentAt[id], f); {
			case must:
				s.lost++
			case gap:
				s.gap[q]++
			default:
				s.gone++
			}
		}
	}
	return s
}
