//go:build integration

package integration

// Issue 38's defects where a hop meets something else: a copy that keeps
// the broker's counters, a rung or .dlq that refuses the hop, a restart in
// between, a one-attempt policy, and a consumer that ended with an error.

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/fxmodule"
	"github.com/acemq/acemq-go/internal/testenv"
	"github.com/acemq/acemq-go/middleware"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/ops"
	"github.com/acemq/acemq-go/retry"
	"github.com/acemq/acemq-go/topology"
)

// Defect 1: a message requeued three times by its handler (a dependency
// down), then failing for good on a quorum queue, runs every attempt of a
// six-attempt policy once, 1 to 6: the rung hops drop x-delivery-count, so
// the returns before them are not counted again after.
func TestHopsQuorumAttemptsRunWithoutAGap(t *testing.T) {
	b, _ := consBroker(t)
	p := retry.Fixed(6, time.Second, retry.InProcessLimit(0)) // every wait on a broker rung
	q := testenv.Queue(t, b, p)                               // quorum
	var calls consCalls
	h := mq.HandlerFunc(func(_ context.Context, d *mq.Delivery) error {
		if n := calls.add(d); n <= 3 {
			return mq.Requeue(fmt.Errorf("dependency down (call %d)", n))
		}
		return errors.New("fails")
	})
	c, err := b.Consume(testenv.Context(t, 20*time.Second), q, h, middleware.Standard(p), mq.WithRequeuePause(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer testenv.Stop(t, c)
	testenv.Publish(t, b, q, mq.Message{Body: []byte("x"), MessageId: "count-once"})
	testenv.WaitCount(t, b, topology.DeadLetterQueue(q), 1, 60*time.Second)
	_, attempts := calls.snapshot()
	if want := []int{1, 2, 3, 4, 5, 6}; !slices.Equal(attempts, want) {
		t.Fatalf("attempts %v, want %v (three requeues, then every attempt of the policy once)", attempts, want)
	}
	got := testenv.GetAll(t, b, topology.DeadLetterQueue(q))
	if len(got) != 1 || mq.AttemptOf(got[0].Headers) != 7 {
		t.Fatalf(".dlq: %v, want one message carrying attempt 7", headersOf(got))
	}
	if _, ok := got[0].Headers["x-delivery-count"]; ok {
		t.Errorf("the dead letter carries x-delivery-count=%v", got[0].Headers["x-delivery-count"])
	}
}

// Defect 1: a replay starts the message over. A message in .dlq that
// carries a quorum queue's counters (the broker's own dead-lettering past
// a delivery limit writes them) is attempt 1 after ops.Replay.
func TestHopsReplayStartsAtAttemptOne(t *testing.T) {
	b, _ := consBroker(t)
	p := retry.Fixed(3, 10*time.Millisecond)
	q := testenv.Queue(t, b, p, topology.DeadLetter()) // quorum
	dlq := topology.DeadLetterQueue(q)
	testenv.Publish(t, b, dlq, mq.Message{Body: []byte("x"), MessageId: "replayed",
		Headers: amqp.Table{"x-delivery-count": int64(5), "x-acquired-count": int64(6), mq.HeaderSourceQueue: q,
			mq.HeaderAttempt: int32(4), mq.HeaderReason: string(mq.ReasonExhausted)}})
	res, err := ops.Replay(testenv.Context(t, 20*time.Second), b, dlq, ops.ReplayOptions{})
	if err != nil || res.Moved != 1 {
		t.Fatalf("replay: %+v, %v", res, err)
	}
	first := make(chan int, 4)
	h := mq.HandlerFunc(func(_ context.Context, d *mq.Delivery) error {
		first <- d.Attempt()
		if _, ok := d.Headers["x-delivery-count"]; ok {
			return fmt.Errorf("delivered with x-delivery-count=%v", d.Headers["x-delivery-count"])
		}
		return nil
	})
	c, err := b.Consume(testenv.Context(t, 20*time.Second), q, h, middleware.Standard(p))
	if err != nil {
		t.Fatal(err)
	}
	defer testenv.Stop(t, c)
	select {
	case a := <-first:
		if a != 1 {
			t.Fatalf("the first delivery after the replay is attempt %d, want 1", a)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the replayed message was not delivered")
	}
}

// refusing declares queue (gone first, if it was there) as given, but
// holding nothing (x-max-length 0) and refusing what comes
// (reject-publish): the broker nacks every hop to it. accept declares it
// again as given.
func refusing(t *testing.T, b *mq.Broker, queue topology.Queue) (accept func()) {
	t.Helper()
	ch, err := b.Channel(testenv.Context(t, 15*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ch.Close() })
	declare := func(args amqp.Table) {
		t.Helper()
		if _, err := ch.QueueDelete(queue.Name, false, false, false); err != nil {
			t.Fatalf("delete %s: %v", queue.Name, err)
		}
		if _, err := ch.QueueDeclare(queue.Name, queue.Durable, false, false, false, args); err != nil {
			t.Fatalf("declare %s: %v", queue.Name, err)
		}
	}
	full := amqp.Table{}
	for k, v := range queue.Args {
		full[k] = v
	}
	full["x-max-length"], full["x-overflow"] = int32(0), "reject-publish"
	quorum := queue.Args[topology.ArgQueueType] == topology.QueueTypeQuorum
	if quorum {
		// A quorum queue takes one message past its limit before it
		// refuses: fill it with one that stays (no TTL while it refuses).
		delete(full, topology.ArgMessageTTL)
	}
	declare(full)
	if quorum {
		if err := ch.Publish("", queue.Name, false, false, amqp.Publishing{Body: []byte("filler")}); err != nil {
			t.Fatal(err)
		}
		testenv.WaitCount(t, b, queue.Name, 1, 10*time.Second)
	}
	return func() { declare(queue.Args) }
}

// failingConsumer consumes q on b with the standard stack of p (not
// declaring: the test did) and a handler that fails every attempt,
// recorded in calls.
func failingConsumer(t *testing.T, b *mq.Broker, q string, p retry.Policy, calls *consCalls) *mq.Consumer {
	t.Helper()
	h := mq.HandlerFunc(func(_ context.Context, d *mq.Delivery) error {
		calls.add(d)
		return fmt.Errorf("fails on attempt %d", d.Attempt())
	})
	c, err := b.Consume(testenv.Context(t, 20*time.Second), q, h,
		middleware.Standard(p, middleware.WithoutDeclare()), mq.WithRequeuePause(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Defect 3 (and 5, for a pending hop): a rung that exists but refuses the
// hop makes the hop wait, not the handler run again. While it refuses,
// the handler is not called, a restart included; once it accepts, the
// message waits the rung's wait and comes back as the next attempt.
func TestHopsRefusedRungWaitsForTheRung(t *testing.T) {
	for _, tc := range []struct {
		name    string
		policy  retry.Policy
		restart bool
	}{
		{"classic rung, restart", retry.Fixed(3, 2*time.Second, retry.InProcessLimit(0)), true},
		{"durable rung", retry.Fixed(3, 2*time.Second, retry.InProcessLimit(0), retry.DurableRungs()), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, lg := consBroker(t)
			p := tc.policy
			q := testenv.Queue(t, b, p, topology.Classic(), topology.DeadLetter())
			if err := b.Declare(testenv.Context(t, 15*time.Second), topology.New().Queue(q, topology.Classic(), topology.DeadLetter(), topology.Retry(p))); err != nil {
				t.Fatal(err)
			}
			rung := topology.Rung(q, p, 2*time.Second)
			accept := refusing(t, b, rung)
			var calls consCalls
			c := failingConsumer(t, b, q, p, &calls)
			testenv.Publish(t, b, q, mq.Message{Body: []byte("x"), MessageId: "rung-refused"})
			if !testenv.Poll(20*time.Second, func() bool { return lg.Count(mq.EventRequeued) >= 3 || calls.n() > 1 }) {
				t.Fatalf("within 20 s: %d returns, %d calls (events: %s)", lg.Count(mq.EventRequeued), calls.n(), lg.Events())
			}
			if _, a := calls.snapshot(); len(a) != 1 {
				t.Fatalf("while %s refused the hop the handler ran attempts %v, want only 1", rung.Name, a)
			}
			if tc.restart {
				testenv.Stop(t, c)
				b2, lg2 := consBroker(t)
				c = failingConsumer(t, b2, q, p, &calls)
				if !testenv.Poll(20*time.Second, func() bool { return lg2.Count(mq.EventRequeued) >= 2 || calls.n() > 1 }) {
					t.Fatalf("after the restart, within 20 s: %d returns, %d calls (events: %s)", lg2.Count(mq.EventRequeued), calls.n(), lg2.Events())
				}
				if _, a := calls.snapshot(); len(a) != 1 {
					t.Fatalf("after a restart, while %s refused the hop, the handler ran attempts %v, want only 1", rung.Name, a)
				}
			}
			defer testenv.Stop(t, c)
			accept()
			accepted := time.Now()
			testenv.WaitCount(t, b, topology.DeadLetterQueue(q), 1, 60*time.Second)
			at, a := calls.snapshot()
			if !slices.Equal(a, []int{1, 2, 3}) {
				t.Fatalf("attempts %v, want 1 2 3", a)
			}
			if w := at[1].Sub(accepted); w < 1500*time.Millisecond {
				t.Errorf("attempt 2 ran %v after the rung accepted, want at least its 2 s wait", w.Round(time.Millisecond))
			}
			if w := at[2].Sub(at[1]); w < 1500*time.Millisecond {
				t.Errorf("attempt 3 ran %v after attempt 2, want at least the 2 s wait", w.Round(time.Millisecond))
			}
			got := testenv.GetAll(t, b, topology.DeadLetterQueue(q))
			if len(got) != 1 || mq.AttemptOf(got[0].Headers) != 4 || got[0].Headers[mq.HeaderReason] != string(mq.ReasonExhausted) {
				t.Fatalf(".dlq: %v, want one message, exhausted after 3 attempts", headersOf(got))
			}
			if n := testenv.Count(t, b, q); n != 0 {
				t.Errorf("%s still holds %d messages", q, n)
			}
		})
	}
}

// Defect 5: a .dlq that refuses every set-aside, and a restart. The new
// process never hands the message to the handler again: the set-aside it
// owes travels with the message.
func TestHopsRefusedAsideSurvivesARestart(t *testing.T) {
	b, lg := consBroker(t)
	p := retry.Waits(10*time.Millisecond, 10*time.Millisecond) // 3 attempts, in-process
	q := testenv.Queue(t, b, p)                                // quorum
	dlq := topology.DeadLetterQueue(q)
	accept := refusing(t, b, topology.Queue{Name: dlq, Durable: true})
	var calls consCalls
	c := failingConsumer(t, b, q, p, &calls)
	testenv.Publish(t, b, q, mq.Message{Body: []byte("x"), MessageId: "aside-restart"})
	if !testenv.Poll(20*time.Second, func() bool { return lg.Count(mq.EventSetAsideFailed) >= 2 }) {
		t.Fatalf("%d refused set-asides within 20 s (events: %s)", lg.Count(mq.EventSetAsideFailed), lg.Events())
	}
	testenv.Stop(t, c)
	if _, a := calls.snapshot(); !slices.Equal(a, []int{1, 2, 3}) {
		t.Fatalf("before the restart the handler ran attempts %v, want 1 2 3", a)
	}

	b2, lg2 := consBroker(t)
	c = failingConsumer(t, b2, q, p, &calls)
	defer testenv.Stop(t, c)
	if !testenv.Poll(20*time.Second, func() bool { return lg2.Count(mq.EventSetAsideFailed) >= 2 || calls.n() > 3 }) {
		t.Fatalf("after the restart, within 20 s: %d refused set-asides, %d calls (events: %s)", lg2.Count(mq.EventSetAsideFailed), calls.n(), lg2.Events())
	}
	if _, a := calls.snapshot(); len(a) != 3 {
		t.Fatalf("after a restart the handler ran attempts %v, want none beyond 1 2 3", a)
	}
	accept()
	testenv.WaitCount(t, b, dlq, 1, 30*time.Second)
	testenv.WaitCount(t, b, q, 0, 10*time.Second)
	if _, a := calls.snapshot(); len(a) != 3 {
		t.Fatalf("the handler ran attempts %v by the time the message reached %s, want 1 2 3", a, dlq)
	}
	got := testenv.GetAll(t, b, dlq)
	if len(got) != 1 || mq.AttemptOf(got[0].Headers) != 4 || got[0].Headers[mq.HeaderError] != "fails on attempt 3" {
		t.Fatalf("%s: %v, want one message, attempt 4, the third attempt's error", dlq, headersOf(got))
	}
}

// Defect 7: a queue declared with a one-attempt policy has a policy, and
// StandardDeclared takes it.
func TestHopsStandardDeclaredTakesAOneAttemptPolicy(t *testing.T) {
	b, _ := consBroker(t)
	one := retry.Fixed(1, time.Second)
	q := testenv.Name(t)
	testenv.CleanupDerived(t, q, one)
	ctx := testenv.Context(t, 30*time.Second)
	if err := b.Declare(ctx, topology.New().Queue(q, topology.Retry(one))); err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	h := mq.HandlerFunc(func(context.Context, *mq.Delivery) error { calls.Add(1); return errors.New("fails") })
	c, err := b.Consume(ctx, q, h, middleware.StandardDeclared())
	if err != nil {
		t.Fatalf("StandardDeclared on a queue declared with Retry(Fixed(1, …)): %v", err)
	}
	defer testenv.Stop(t, c)
	testenv.Publish(t, b, q, mq.Message{Body: []byte("x"), MessageId: "once"})
	testenv.WaitCount(t, b, topology.DeadLetterQueue(q), 1, 20*time.Second)
	if n := calls.Load(); n != 1 {
		t.Errorf("handler called %d times, want 1", n)
	}
}

// Readiness: a consumer that ended with an error (it gave up, its queue
// deleted for good) keeps Broker.Check and ReadyHandler failing until it
// is stopped on purpose.
func TestHopsConsumerThatGaveUpKeepsReadinessFailing(t *testing.T) {
	helper := testenv.Broker(t, mq.Config{Logger: testenv.Discard()})
	q := testenv.Name(t)
	testenv.Cleanup(t, q)
	if err := helper.Declare(testenv.Context(t, 15*time.Second), topology.New().Queue(q, topology.Classic())); err != nil {
		t.Fatal(err)
	}
	b := testenv.Broker(t, mq.Config{Logger: testenv.Logger(t), ReconnectMin: 20 * time.Millisecond, ReconnectMax: 200 * time.Millisecond})
	c, err := b.Consume(testenv.Context(t, 15*time.Second), q, mq.HandlerFunc(func(context.Context, *mq.Delivery) error { return nil }),
		mq.WithGiveUpAfter(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ready := fxmodule.ReadyHandler(b)
	probe := func() int {
		rec := httptest.NewRecorder()
		ready.ServeHTTP(rec, httptest.NewRequest("GET", "/ready", nil))
		return rec.Code
	}
	if err := b.Check(context.Background()); err != nil || probe() != 200 {
		t.Fatalf("before: Check %v, ready %d", err, probe())
	}
	if _, err := helper.DeleteQueue(testenv.Context(t, 10*time.Second), q); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.Done():
	case <-time.After(15 * time.Second):
		t.Fatal("the consumer did not give up")
	}
	if c.Err() == nil {
		t.Fatal("the consumer ended without an error")
	}
	time.Sleep(200 * time.Millisecond)
	err = b.Check(context.Background())
	if !errors.Is(err, mq.ErrNotReady) {
		t.Errorf("Check after the consumer gave up: %v, want ErrNotReady", err)
	}
	if code := probe(); code != 503 {
		t.Errorf("ReadyHandler after the consumer gave up: %d, want 503", code)
	}
	testenv.Stop(t, c)
	if err := b.Check(context.Background()); err != nil {
		t.Errorf("Check after the consumer was stopped: %v, want nil", err)
	}
	if code := probe(); code != 200 {
		t.Errorf("ReadyHandler after the consumer was stopped: %d, want 200", code)
	}
}
