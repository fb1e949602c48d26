//go:build integration

package integration

// The consumer defects of the second audit (issue 22) and the flapping
// alarm on a single cut (issue 24), each reproduced on the real broker.

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/internal/testenv"
	"github.com/acemq/acemq-go/middleware"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/retry"
	"github.com/acemq/acemq-go/topology"
)

// A handler that ignores its context holds its own slot across a lost
// connection, not the consumer: the other workers go on with the new
// subscription at once.
func TestAuditStuckHandlerDoesNotStopResubscription(t *testing.T) {
	direct, b, p, q := coreCutRig(t)
	release := make(chan struct{})
	var releaseOnce sync.Once
	free := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(free) // before the broker closes: it waits for the handler
	var stuck atomic.Bool
	var handled sync.Map
	var n atomic.Int32
	h := mq.HandlerFunc(func(ctx context.Context, d *mq.Delivery) error {
		if d.MessageId == "stuck" {
			stuck.Store(true)
			<-release // ignores ctx
			return nil
		}
		if _, dup := handled.LoadOrStore(d.MessageId, true); !dup {
			n.Add(1)
		}
		return nil
	})
	c, err := b.Consume(testenv.Context(t, 10*time.Second), q, h, mq.WithConcurrency(4))
	if err != nil {
		t.Fatal(err)
	}
	testenv.Publish(t, direct, q, mq.Message{MessageId: "stuck"})
	testenv.Eventually(t, 10*time.Second, stuck.Load, "the stuck handler never started")
	p.Cut()
	testenv.Publish(t, direct, q, consMessages("after", 10)...)
	ok := testenv.Poll(10*time.Second, func() bool { return n.Load() == 10 })
	if !ok {
		t.Fatalf("%d of 10 messages published after the cut handled in 10 s, with 3 of 4 workers free", n.Load())
	}
	// The consumer still owns the stuck handler: Done waits for it.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := c.Stop(ctx); err == nil {
		t.Fatal("Stop returned nil with a handler still running")
	}
	free()
	select {
	case <-c.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done not closed 10 s after the stuck handler returned")
	}
}

// A fresh message that shares its id with one the consumer returned
// earlier is attempt 1: the memo of returns describes the returned copy,
// not every message with its id.
func TestAuditFreshMessageWithAReturnedIdIsAttemptOne(t *testing.T) {
	b, _ := consBroker(t)
	q := coreQueue(t, b, nil)
	pub := b.Publisher("")
	ctx := testenv.Context(t, 30*time.Second)
	var fresh atomic.Int32 // the attempt the second message read
	var newSeen atomic.Bool
	h := mq.HandlerFunc(func(ctx context.Context, d *mq.Delivery) error {
		if string(d.Body) == "new" {
			fresh.Store(int32(d.Attempt()))
			newSeen.Store(true)
			return nil
		}
		if d.Attempt() == 3 {
			if err := pub.Publish(ctx, q, mq.Message{MessageId: "dup", Body: []byte("new")}); err != nil {
				return mq.Requeue(err)
			}
		}
		if !newSeen.Load() && d.Attempt() < 20 {
			return mq.Requeue(fmt.Errorf("not yet"))
		}
		return nil
	})
	c, err := b.Consume(ctx, q, h, mq.WithRequeuePause(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer testenv.Stop(t, c)
	testenv.Publish(t, b, q, mq.Message{MessageId: "dup", Body: []byte("old")})
	testenv.Eventually(t, 20*time.Second, newSeen.Load, "the second message never came")
	if got := fresh.Load(); got != 1 {
		t.Fatalf("a fresh message with the id of one requeued earlier read attempt %d, want 1", got)
	}
}

// Two replicas: A returns a message and loses its connection before the
// redelivery; B takes it; a replay of it lands on A, which must not charge
// it with what it remembered of the copy before.
func TestAuditReplayOnAReplicaThatRememberedTheIdIsAttemptOne(t *testing.T) {
	direct, a, p, q := coreCutRig(t)
	ctx := testenv.Context(t, 30*time.Second)
	var first atomic.Bool
	var replayAttempt atomic.Int32
	cutNow := make(chan struct{})
	ha := mq.HandlerFunc(func(ctx context.Context, d *mq.Delivery) error {
		if d.Headers[mq.HeaderReplayedAt] != nil {
			replayAttempt.Store(int32(d.Attempt()))
			return nil
		}
		if first.CompareAndSwap(false, true) {
			close(cutNow) // cut during the requeue pause: remembered, never redelivered here
			return mq.Requeue(fmt.Errorf("fails once"))
		}
		return nil
	})
	ca, err := a.Consume(ctx, q, ha, mq.WithRequeuePause(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer testenv.Stop(t, ca)
	testenv.Publish(t, direct, q, mq.Message{MessageId: "replica", Body: []byte("x")})
	select {
	case <-cutNow:
	case <-ctx.Done():
		t.Fatal("replica A never got the message")
	}
	time.Sleep(100 * time.Millisecond) // settle has remembered it and pauses
	var onB atomic.Bool
	cb, err := direct.Consume(ctx, q, mq.HandlerFunc(func(ctx context.Context, d *mq.Delivery) error {
		onB.Store(true)
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	p.Cut()
	testenv.Eventually(t, 10*time.Second, onB.Load, "replica B never got the message A lost")
	testenv.Stop(t, cb)
	// The operator replays it (as ops.Replay does: same id, attempt reset,
	// replayed-at stamped).
	testenv.Publish(t, direct, q, mq.Message{MessageId: "replica", Body: []byte("x"),
		Headers: amqp.Table{mq.HeaderReplayedAt: time.Now().UTC()}})
	testenv.Eventually(t, 10*time.Second, func() bool { return replayAttempt.Load() != 0 }, "the replay never reached A")
	if got := replayAttempt.Load(); got != 1 {
		t.Fatalf("the replay read attempt %d on the replica that remembered its id, want 1", got)
	}
}

// auditVersion is the version the test broker reports ("3.10.8", "4.3.6").
func auditVersion(t *testing.T) string {
	t.Helper()
	conn, err := amqp.Dial(testenv.URL())
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer conn.Close()
	v, _ := conn.Properties["version"].(string)
	return v
}

// auditCountsOnlyFailures says whether the broker counts only the returns
// that say a message failed toward x-delivery-count (RabbitMQ 4.3 on).
func auditCountsOnlyFailures(v string) bool {
	var major, minor int
	fmt.Sscanf(v, "%d.%d", &major, &minor)
	return major > 4 || major == 4 && minor >= 3
}

// Stopping a consumer with a window of deliveries it never started gives
// them back as nobody's failure: on 4.3, deploy after deploy, their
// x-delivery-count stays absent.
func TestAuditRepeatedStopsLeaveTheDeliveryCount(t *testing.T) {
	b, _ := consBroker(t)
	q := testenv.Queue(t, b, retry.Policy{})
	const total, window, rounds = 60, 50, 3
	testenv.Publish(t, b, q, consMessages("deploy", total)...)
	var handled atomic.Int32
	for round := range rounds {
		var started atomic.Int32
		c, err := b.Consume(testenv.Context(t, 10*time.Second), q, mq.HandlerFunc(func(ctx context.Context, d *mq.Delivery) error {
			started.Add(1)
			time.Sleep(20 * time.Millisecond)
			handled.Add(1)
			return nil
		}), mq.WithPrefetch(window), mq.WithConcurrency(1))
		if err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, 10*time.Second, func() bool {
			m, _ := testenv.Ready(testenv.Context(t, 5*time.Second), b, q)
			return started.Load() > 0 && m <= total-int(handled.Load())-window
		}, "round %d: the consumer did not receive its window", round)
		testenv.Stop(t, c)
	}
	got := testenv.GetAll(t, b, q)
	if len(got)+int(handled.Load()) != total {
		t.Fatalf("%d left and %d handled of %d published", len(got), handled.Load(), total)
	}
	counted := 0
	for _, d := range got {
		if n, _ := d.Headers["x-delivery-count"].(int64); n > 0 {
			counted++
		}
	}
	v := auditVersion(t)
	t.Logf("RabbitMQ %s: %d of %d messages left after %d stops carry x-delivery-count > 0", v, counted, len(got), rounds)
	if auditCountsOnlyFailures(v) && counted != 0 {
		t.Fatalf("after %d stops %d of %d messages carry x-delivery-count > 0, want 0", rounds, counted, len(got))
	}
}

// A set-aside that keeps failing, on a queue with the default topology
// (no dead-letter route) and a delivery limit: on 4.3 the original goes
// back as nobody's failure and is not counted, so once .dlq can be written
// again the message is set aside there, never dropped by the broker.
func TestAuditFailingSetAsideIsNotDroppedByTheDeliveryLimit(t *testing.T) {
	b, lg := consBroker(t)
	p := retry.Waits(time.Second).With(retry.InProcessLimit(0))
	q := testenv.Queue(t, b, p, topology.Args(map[string]any{"x-delivery-limit": 3}))
	dlq := topology.DeadLetterQueue(q)
	calls := &consCalls{}
	h := mq.HandlerFunc(func(_ context.Context, d *mq.Delivery) error { calls.add(d); return fmt.Errorf("fails") })
	c, err := b.Consume(testenv.Context(t, 20*time.Second), q, h,
		middleware.Standard(p, middleware.WithoutDeclare()), mq.WithRequeuePause(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer testenv.Stop(t, c)
	testenv.Publish(t, b, q, mq.Message{Body: []byte("r"), MessageId: "kept"})
	// Each delivery makes one failed set-aside. The first one is carried:
	// a copy goes home with the pending hop (the memo a restart keeps) and
	// is delivered at once; after that the pause before each return doubles
	// (200, 400, 800 ms ...). Wait for the
	// deliveries rather than a fixed time, which a loaded machine fills
	// with fewer of them: up to 4.2 the fourth, the limit's last; on 4.3
	// the sixth, past the limit of 3 (what 2 s gave on an idle machine).
	// The bound only ends a run where they never come; the verdicts below
	// say what came.
	v := auditVersion(t)
	returns := 4
	if auditCountsOnlyFailures(v) {
		returns = 6
	}
	testenv.Poll(time.Minute, func() bool { return lg.Count(mq.EventSetAsideFailed) >= returns })
	if !auditCountsOnlyFailures(v) {
		// Up to 4.2 every return counts, a nack too: past the limit the
		// broker drops it (docs/reliability.md says when).
		// The pause before each return doubles with the returns counted,
		// so the limit takes long to reach (200, 400, 800 ms here). The
		// gap after the first failure is the carried copy's, no pause:
		// compare the last two gaps, both pauses.
		// Each delivery makes one set-aside: the handler runs only on
		// the first (its attempts are used), the others make it again.
		fails := lg.All(mq.EventSetAsideFailed)
		called, _ := calls.snapshot()
		t.Logf("RabbitMQ %s: %d calls, %d failed set-asides before the limit of 3", v, len(called), len(fails))
		if len(called) != 1 {
			t.Fatalf("%d calls of the handler, want 1: a message whose set-aside failed was handled again", len(called))
		}
		if len(fails) < 4 {
			t.Fatalf("%d deliveries: the message was dropped before its delivery limit of 3", len(fails))
		}
		at := make([]time.Time, len(fails))
		for i, r := range fails {
			at[i] = r.Time
		}
		n := len(at)
		if first, last := at[n-2].Sub(at[n-3]), at[n-1].Sub(at[n-2]); last < first+100*time.Millisecond {
			t.Fatalf("the pause before a failed set-aside's return went from %v to %v: it does not grow with the returns counted", first, last)
		}
		return
	}
	if err := b.Declare(testenv.Context(t, 10*time.Second), topology.New().Queue(dlq, topology.Classic())); err != nil {
		t.Fatal(err)
	}
	ok := testenv.Poll(10*time.Second, func() bool { return testenv.Count(t, b, dlq) == 1 })
	if !ok {
		t.Fatalf("RabbitMQ %s: after %d failed set-asides the message never reached %s once it existed (%d in %s): dropped by the delivery limit",
			v, lg.Count(mq.EventSetAsideFailed), dlq, testenv.Count(t, b, q), q)
	}
}

// Deliberate cuts of a working connection are not flapping, even a few
// within the 5 s a connection must live to count as stable: flapping is a connection that keeps dying soon after
// it opens.
func TestAuditCutsOfAWorkingConnectionAreNotFlapping(t *testing.T) {
	lg := testenv.NewLogRecorder(t)
	p, u := testenv.Proxy(t)
	b := testenv.Broker(t, mq.Config{URLs: []string{u}, Logger: lg.Logger(), Heartbeat: 2 * time.Second})
	q := coreQueue(t, b, nil)
	pub := b.Publisher("")
	defer pub.Close()
	for i := range 3 {
		time.Sleep(1500 * time.Millisecond)
		if err := pub.Publish(testenv.Context(t, 10*time.Second), q, mq.Message{MessageId: fmt.Sprint("w", i)}); err != nil {
			t.Fatalf("publish: %v", err)
		}
		if n := p.Cut(); n != 1 {
			t.Fatalf("cut %d: %d connections", i+1, n)
		}
		testenv.Eventually(t, 10*time.Second, func() bool { return lg.Count(mq.EventConnectionRestored) == i+1 }, "restored after cut %d", i+1)
	}
	if n := lg.Count(mq.EventConnectionFlapping); n != 0 {
		t.Fatalf("%d %s records for 3 cuts, each of a connection up for 1.5 s", n, mq.EventConnectionFlapping)
	}
}
