//go:build integration

package integration

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/acemq/acemq-go/internal/testenv"
	"github.com/acemq/acemq-go/middleware"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/retry"
	"github.com/acemq/acemq-go/topology"
)

// Issue 21: what the broker forgets, the library declares again.

// recovWindow is how soon after the library's reconnect (or the queue's
// deletion) a message published then must be handled.
const recovWindow = 5 * time.Second

// recovSeen records the message ids a handler was called with, and when
// each came first.
type recovSeen struct {
	mu    sync.Mutex
	first map[string]time.Time
}

func newRecovSeen() *recovSeen { return &recovSeen{first: map[string]time.Time{}} }

func (s *recovSeen) handler() mq.HandlerFunc {
	return func(_ context.Context, d *mq.Delivery) error {
		s.mu.Lock()
		defer s.mu.Unlock()
		if _, ok := s.first[d.MessageId]; !ok {
			s.first[d.MessageId] = time.Now()
		}
		return nil
	}
}

// all reports whether every id was seen, and when the last of them was.
func (s *recovSeen) all(ids []string) (bool, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var last time.Time
	for _, id := range ids {
		at, ok := s.first[id]
		if !ok {
			return false, time.Time{}
		}
		if at.After(last) {
			last = at
		}
	}
	return true, last
}

// recovPublish publishes n messages prefix-0 … through pub to key, one
// every 20 ms, each published again while it comes back unroutable (the
// queue or its exchange not there yet: the gap) or nacked, for at most
// 10 s in all. It returns the
// ids and how many publishes were unroutable.
func recovPublish(t *testing.T, ctx context.Context, pub *mq.Publisher, key, prefix string, n int) ([]string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var ids []string
	gap := 0
	for i := range n {
		id := fmt.Sprintf("%s-%d", prefix, i)
		for {
			err := pub.Publish(ctx, key, mq.Message{MessageId: id, Body: []byte(id)})
			if err == nil {
				break
			}
			// Unroutable while the queue is gone; the broker may nack one
			// routed to it as it goes; an auto-delete exchange may be
			// gone too (NOT_FOUND).
			gone := errors.Is(err, mq.ErrUnroutable) || errors.Is(err, mq.ErrNacked) || errors.Is(err, mq.ErrNotFound)
			if !gone || ctx.Err() != nil {
				t.Fatalf("publish %s (%d unroutable so far: is the queue not declared again?): %v", id, gap, err)
			}
			gap++
			time.Sleep(20 * time.Millisecond)
		}
		ids = append(ids, id)
		time.Sleep(20 * time.Millisecond)
	}
	return ids, gap
}

// recovWaitEvent waits for the n-th record msg in lg after since, and
// returns when it came.
func recovWaitEvent(t *testing.T, lg *testenv.LogRecorder, msg string, n int, d time.Duration) time.Time {
	t.Helper()
	var at time.Time
	if !testenv.Poll(d, func() bool {
		rs := lg.All(msg)
		if len(rs) < n {
			return false
		}
		at = rs[n-1].Time
		return true
	}) {
		t.Fatalf("no %d× %s within %v; events: %s", n, msg, d, lg.Events())
	}
	return at
}

// An exclusive queue of the instance's own, bound to a fanout exchange:
// after a connection cut the broker has deleted it, and the library
// declares it again, with its binding, before the consumer resubscribes;
// messages published to the exchange after the reconnect are handled
// within 5 s of it.
func TestRecoveryExclusiveBroadcastAfterCut(t *testing.T) {
	recovBroadcast(t, nil, topology.Exclusive())
}

// The same with an auto-delete queue bound to an auto-delete exchange: the
// broker deletes the queue with its last consumer and the exchange with
// its last binding; both are declared again.
func TestRecoveryAutoDeleteBroadcastAfterCut(t *testing.T) {
	recovBroadcast(t, []topology.ExchangeOption{topology.AutoDelete()}, topology.AutoDelete())
}

// recovBroadcast runs a broadcast consumer on a queue declared with qopt,
// bound to a fanout exchange declared with exopts, through two cuts.
func recovBroadcast(t *testing.T, exopts []topology.ExchangeOption, qopt topology.QueueOption) {
	testenv.NoLeaks(t)
	ctx := testenv.Context(t, 60*time.Second)
	lg := testenv.NewLogRecorder(t)
	proxy, url := testenv.Proxy(t)
	b := testenv.Broker(t, mq.Config{URLs: []string{url}, Logger: lg.Logger(), Heartbeat: 2 * time.Second})
	direct := testenv.Broker(t, mq.Config{Logger: testenv.Discard()})
	ex := testenv.Name(t, "fanout")
	testenv.CleanupExchanges(t, ex)
	q := topology.InstanceQueue(testenv.Name(t, "each")) // it goes with the connection
	if err := b.Declare(ctx, topology.New().Exchange(ex, append(exopts, topology.Fanout)...).Queue(q, qopt).Binding(q, ex, "")); err != nil {
		t.Fatal(err)
	}
	seen := newRecovSeen()
	c, err := b.Consume(ctx, q, seen.handler())
	if err != nil {
		t.Fatal(err)
	}
	defer testenv.Stop(t, c)
	pub := direct.Publisher(ex)
	defer pub.Close()
	before, _ := recovPublish(t, ctx, pub, "", "before", 3)
	testenv.Eventually(t, 5*time.Second, func() bool { ok, _ := seen.all(before); return ok }, "not handled before the cut")

	for cut := 1; cut <= 2; cut++ {
		proxy.Cut()
		restored := recovWaitEvent(t, lg, mq.EventConnectionRestored, cut, 10*time.Second)
		ids, gap := recovPublish(t, ctx, pub, "", fmt.Sprintf("after%d", cut), 20)
		var last time.Time
		if !testenv.Poll(time.Until(restored.Add(recovWindow)), func() bool {
			var ok bool
			ok, last = seen.all(ids)
			return ok
		}) {
			t.Fatalf("cut %d: the messages published after the reconnect were not all handled within %v of it; events: %s", cut, recovWindow, lg.Events())
		}
		_, firstAt := seen.all(ids[:1])
		t.Logf("cut %d: first message after the reconnect handled %v after it, all 20 by %v; %d unroutable publishes in the gap",
			cut, firstAt.Sub(restored).Round(time.Millisecond), last.Sub(restored).Round(time.Millisecond), gap)
	}
	if n := lg.Count(mq.EventTopologyRedeclared); n < 2 {
		t.Errorf("%d %s records, want one per reconnect at least", n, mq.EventTopologyRedeclared)
	}
}

// A durable queue the service declared, deleted under its consumer by
// somebody else: the broker cancels the consumer, the library declares the
// queue again with its failure half and resubscribes; messages published
// after the deletion are handled within 5 s of it.
func TestRecoveryDeletedDurableQueue(t *testing.T) {
	testenv.NoLeaks(t)
	ctx := testenv.Context(t, 60*time.Second)
	b, lg := consBroker(t)
	p := retry.Exponential(3, 50*time.Millisecond)
	q := testenv.Name(t)
	testenv.CleanupDerived(t, q, p)
	if err := b.Declare(ctx, topology.New().Queue(q, topology.DeadLetter())); err != nil {
		t.Fatal(err)
	}
	seen := newRecovSeen()
	c, err := b.Consume(ctx, q, seen.handler(), middleware.Standard(p))
	if err != nil {
		t.Fatal(err)
	}
	defer testenv.Stop(t, c)
	pub := b.Publisher("")
	defer pub.Close()
	before, _ := recovPublish(t, ctx, pub, q, "before", 3)
	testenv.Eventually(t, 5*time.Second, func() bool { ok, _ := seen.all(before); return ok }, "not handled before the deletion")

	testenv.DeleteBehind(t, b, q)
	deleted := time.Now()
	ids, gap := recovPublish(t, ctx, pub, q, "after", 30)
	var last time.Time
	if !testenv.Poll(time.Until(deleted.Add(recovWindow)), func() bool {
		var ok bool
		ok, last = seen.all(ids)
		return ok
	}) {
		t.Fatalf("the messages published after the deletion were not all handled within %v of it; events: %s", recovWindow, lg.Events())
	}
	at := recovWaitEvent(t, lg, mq.EventTopologyRedeclared, 1, time.Second)
	t.Logf("declared again %v after the deletion; all 30 handled by %v; %d unroutable publishes in the gap",
		at.Sub(deleted).Round(time.Millisecond), last.Sub(deleted).Round(time.Millisecond), gap)
	rec := lg.All(mq.EventTopologyRedeclared)[0]
	if rec.Attrs["queue"] != q || rec.Attrs["why"] != "missing" {
		t.Errorf("%v: want queue=%s why=missing", rec, q)
	}
	for _, derived := range []string{topology.DeadLetterQueue(q), topology.ParkedQueue(q)} {
		if ok, err := b.QueueExists(ctx, derived); err != nil || !ok {
			t.Errorf("%s exists = %v, %v", derived, ok, err)
		}
	}
	if err := b.Check(ctx); err != nil {
		t.Errorf("Check: %v", err)
	}
}

// recovDeleted starts a consumer of a queue, deletes the queue under it on
// a channel of the test's own, and watches for 2 s: the consumer must keep
// retrying with backoff, not ready, and the queue must stay missing.
func recovDeleted(t *testing.T, b *mq.Broker, lg *testenv.LogRecorder, q string) {
	t.Helper()
	ctx := testenv.Context(t, 30*time.Second)
	c, err := b.Consume(ctx, q, newRecovSeen().handler())
	if err != nil {
		t.Fatal(err)
	}
	defer testenv.Stop(t, c)
	testenv.DeleteBehind(t, b, q)
	recovWaitEvent(t, lg, mq.EventConsumerSubscribeFailed, 2, 5*time.Second)
	time.Sleep(2 * time.Second)
	if ok, err := b.QueueExists(ctx, q); err != nil || ok {
		t.Errorf("QueueExists(%s) = %v, %v; want false: nothing may declare it", q, ok, err)
	}
	if n := lg.Count(mq.EventTopologyRedeclared); n != 0 {
		t.Errorf("%d %s records, want none", n, mq.EventTopologyRedeclared)
	}
	if err := b.Check(ctx); !errors.Is(err, mq.ErrNotReady) {
		t.Errorf("Check = %v, want ErrNotReady", err)
	}
	select {
	case <-c.Done():
		t.Errorf("the consumer ended: %v", c.Err())
	default:
	}
}

// A queue the service never declared (somebody else's) keeps today's
// behaviour when it is deleted under its consumer: retries with backoff,
// readiness false, acemq.consumer.subscribe.failed; nothing declares it.
func TestRecoveryUndeclaredQueueIsNotDeclared(t *testing.T) {
	testenv.NoLeaks(t)
	b, lg := consBroker(t)
	owner := testenv.Broker(t, mq.Config{Logger: testenv.Discard()})
	q := testenv.Queue(t, owner, retry.Policy{}) // declared by another Broker
	recovDeleted(t, b, lg, q)
}

// Config.NoRedeclare: a queue the service declared itself is not declared
// again when it goes missing.
func TestRecoveryNoRedeclare(t *testing.T) {
	testenv.NoLeaks(t)
	lg := testenv.NewLogRecorder(t)
	b := testenv.Broker(t, mq.Config{Logger: lg.Logger(), Heartbeat: 2 * time.Second, NoRedeclare: true})
	q := testenv.Queue(t, b, retry.Policy{})
	recovDeleted(t, b, lg, q)
}
