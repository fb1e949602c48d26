//go:build chaos

package integration

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acemq/acemq-go/internal/testenv"
	"github.com/acemq/acemq-go/middleware"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/retry"
	"github.com/acemq/acemq-go/topology"
)

// chaosIndex is the number at the end of a message id ("panic-042" → 42).
func chaosIndex(t *testing.T, id string) int {
	i := strings.LastIndexByte(id, '-')
	n, err := strconv.Atoi(id[i+1:])
	if err != nil {
		t.Errorf("message id %q has no index", id)
	}
	return n
}

// chaosPublishAll publishes n messages prefix-000 … through a publisher of
// its own, each confirmed, and fails the test if any is not.
func chaosPublishAll(t *testing.T, b *mq.Broker, led *chaosLedger, q, prefix string, n int) {
	t.Helper()
	pub := b.Publisher("")
	defer pub.Close()
	ctx := testenv.Context(t, 60*time.Second)
	var wg sync.WaitGroup
	const workers = 4
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				if err := led.publish(ctx, pub, q, fmt.Sprintf("%s-%03d", prefix, i)); err != nil {
					t.Errorf("publish: %v", err)
				}
			}
		})
	}
	wg.Wait()
}

// Scenario 4a: a handler that panics. Every 7th message panics on its first
// attempt (retried in-process, handled on the second); every 21st panics on
// its second attempt too, and goes round the broker rung <q>.retry.1s to be
// handled on its third. The process lives, the consumer keeps consuming,
// nothing is dead-lettered.
func TestChaosHandlerPanics(t *testing.T) {
	testenv.NoLeaks(t)
	const total = 700
	ctx := testenv.Context(t, 2*time.Minute)
	lg := newChaosLog(t)
	b := chaosBroker(t, lg, testenv.Name(t, "panics"), "")
	p := retry.Waits(10*time.Millisecond, time.Second).With(retry.InProcessLimit(100 * time.Millisecond))
	q := testenv.Queue(t, b, p)
	led := newChaosLedger("handler-panics")

	var panics atomic.Int64
	h := mq.HandlerFunc(func(_ context.Context, d *mq.Delivery) error {
		led.call()
		i := chaosIndex(t, d.MessageId)
		if (i%7 == 0 && d.Attempt() == 1) || (i%21 == 0 && d.Attempt() == 2) {
			panics.Add(1)
			panic(fmt.Sprintf("chaos: %s panics on attempt %d", d.MessageId, d.Attempt()))
		}
		led.done(d.MessageId)
		return nil
	})
	c := chaosConsume(t, ctx, b, q, h, middleware.Standard(p), mq.WithConcurrency(4))
	start := time.Now()
	chaosPublishAll(t, b, led, q, "panic", total)
	if !testenv.Poll(60*time.Second, led.allHandled) {
		t.Errorf("not every message was handled within 60 s")
	}
	took := time.Since(start)
	select {
	case <-c.Done():
		t.Fatalf("the consumer ended: %v", c.Err())
	default:
	}
	testenv.Stop(t, c)

	every7, every21 := (total-1)/7+1, (total-1)/21+1 // ids 0, 7, 14, … and 0, 21, 42, …
	wantPanics := int64(every7 + every21)
	if n := panics.Load(); n != wantPanics {
		t.Errorf("%d panics, want %d", n, wantPanics)
	}
	if n := lg.Count("acemq.handler.panic"); int64(n) != panics.Load() {
		t.Errorf("%d acemq.handler.panic records for %d panics: each is logged once", n, panics.Load())
	}
	rung := topology.RungQueue(q, time.Second)
	for _, qq := range []string{q, rung, topology.DeadLetterQueue(q), topology.ParkedQueue(q)} {
		if n := testenv.Count(t, b, qq); n != 0 {
			t.Errorf("%d messages in %s after the run", n, qq)
		}
	}
	cs := led.counts()
	if want := total + int(wantPanics); cs.calls != want {
		t.Errorf("%d handler calls, want %d (one per message, one more per panic)", cs.calls, want)
	}
	retries := lg.All("acemq.message.settled")
	brokerHops := 0
	for _, r := range retries {
		if r.Attrs["outcome"] == string(mq.OutcomeRetry) {
			brokerHops++
		}
	}
	if want := every21; brokerHops != want {
		t.Errorf("%d messages went round the broker rung %s, want %d", brokerHops, rung, want)
	}
	led.report(t, lg, nil, fmt.Sprintf("panics=%d via_rung=%d took=%v", panics.Load(), brokerHops, took.Round(time.Millisecond)))
}

// Scenario 4b: a handler that hangs (blocks on <-ctx.Done()) under
// middleware.WithTimeout(200ms). Messages i%5==1 hang on their first
// attempt only: timed out, retried in-process, handled on the second.
// Messages i%5==0 hang on every attempt: each attempt times out after
// 200 ms, and when the 3 attempts are used the message is dead-lettered in
// <q>.dlq with reason "exhausted" and the timeout as its error. Nothing
// else is affected and nothing is lost.
func TestChaosHandlerHangs(t *testing.T) {
	testenv.NoLeaks(t)
	const (
		total   = 60
		timeout = 200 * time.Millisecond
	)
	ctx := testenv.Context(t, 2*time.Minute)
	lg := newChaosLog(t)
	b := chaosBroker(t, lg, testenv.Name(t, "hangs"), "")
	p := retry.Fixed(3, 50*time.Millisecond)
	q := testenv.Queue(t, b, p)
	led := newChaosLedger("handler-hangs")

	var (
		hung    atomic.Int64
		mu      sync.Mutex
		longest time.Duration // the longest a hung attempt was held
	)
	h := mq.HandlerFunc(func(ctx context.Context, d *mq.Delivery) error {
		led.call()
		i := chaosIndex(t, d.MessageId)
		if i%5 == 0 || (i%5 == 1 && d.Attempt() == 1) {
			hung.Add(1)
			start := time.Now()
			<-ctx.Done() // hangs until the attempt's deadline
			mu.Lock()
			longest = max(longest, time.Since(start))
			mu.Unlock()
			return ctx.Err()
		}
		led.done(d.MessageId)
		return nil
	})
	c := chaosConsume(t, ctx, b, q, h, middleware.Standard(p, middleware.WithTimeout(timeout)), mq.WithConcurrency(4))
	start := time.Now()
	chaosPublishAll(t, b, led, q, "hang", total)
	alwaysHang := total / 5
	dlq := topology.DeadLetterQueue(q)
	if !testenv.Poll(60*time.Second, func() bool {
		return led.distinct() == total-alwaysHang && testenv.Count(t, b, dlq) == alwaysHang
	}) {
		t.Errorf("within 60 s: %d handled (want %d), %d dead-lettered (want %d)", led.distinct(), total-alwaysHang, testenv.Count(t, b, dlq), alwaysHang)
	}
	took := time.Since(start)
	testenv.Stop(t, c)

	dead := map[string]bool{}
	for _, m := range testenv.GetAll(t, b, dlq) {
		dead[m.MessageId] = true
		if i := chaosIndex(t, m.MessageId); i%5 != 0 {
			t.Errorf("%s was dead-lettered, but only hung on its first attempt", m.MessageId)
		}
		reason, _ := m.Headers[mq.HeaderReason].(string)
		text, _ := m.Headers[mq.HeaderError].(string)
		if reason != string(mq.ReasonExhausted) || !strings.Contains(text, "timed out") || fmt.Sprint(m.Headers[mq.HeaderAttempt]) != "4" {
			t.Errorf("%s in %s: reason %q, error %q, attempt %v; want exhausted, the timeout, 4", m.MessageId, dlq, reason, text, m.Headers[mq.HeaderAttempt])
		}
	}
	if n := testenv.Count(t, b, q); n != 0 {
		t.Errorf("%d messages left in %s", n, q)
	}
	mu.Lock()
	held := longest
	mu.Unlock()
	if held > timeout+time.Second {
		t.Errorf("a hung attempt was held %v: the timeout is %v", held, timeout)
	}
	wantHung := int64(alwaysHang*3 + total/5)
	if n := hung.Load(); n != wantHung {
		t.Errorf("%d hung attempts, want %d", n, wantHung)
	}
	led.report(t, lg, func(id string) bool { return dead[id] }, fmt.Sprintf("timed_out=%d dead_lettered=%d longest_hang=%v took=%v",
		hung.Load(), len(dead), held.Round(time.Millisecond), took.Round(time.Millisecond)))
}

// Scenario 4c: handlers that are slow when Stop comes. 40 messages; a
// consumer with concurrency 4 (prefetch 4) whose handlers sleep:
//
//   - A: Stop with time to spare (5 s) while 4 handlers sleep 1 s: Stop
//     waits for them, acknowledges their messages, returns nil;
//   - B: Stop with 300 ms while 4 handlers sleep 3 s, minding their context:
//     Stop returns its deadline's error at once, the handlers are cancelled,
//     their messages go back to the queue;
//   - C: the same, with handlers that ignore their context (Go cannot stop
//     them): Stop returns at its deadline, the consumer is Done when they
//     return; their messages were requeued when the channel closed, so they
//     are both handled and in the queue (duplicates, at least once).
//
// Nothing is lost: every message is handled or still in the queue.
func TestChaosSlowHandlerDuringStop(t *testing.T) {
	testenv.NoLeaks(t)
	const (
		total = 40
		conc  = 4
	)
	ctx := testenv.Context(t, 2*time.Minute)
	lg := newChaosLog(t)
	b := chaosBroker(t, lg, testenv.Name(t, "slow"), "")
	p := retry.Fixed(3, 50*time.Millisecond)
	q := testenv.Queue(t, b, p)
	led := newChaosLedger("slow-handler-stop")
	chaosPublishAll(t, b, led, q, "slow", total)

	var inFlight atomic.Int64
	slow := func(sleep time.Duration, mindCtx bool) mq.Handler {
		return mq.HandlerFunc(func(ctx context.Context, d *mq.Delivery) error {
			led.call()
			inFlight.Add(1)
			defer inFlight.Add(-1)
			if mindCtx {
				select {
				case <-time.After(sleep):
				case <-ctx.Done():
					return ctx.Err()
				}
			} else {
				time.Sleep(sleep)
			}
			led.done(d.MessageId)
			return nil
		})
	}
	phase := func(name string, h mq.Handler, stopIn time.Duration) (c *mq.Consumer, stopTook time.Duration, stopErr error) {
		t.Helper()
		before := led.counts().handled
		c, err := b.Consume(ctx, q, h, middleware.Standard(p), mq.WithConcurrency(conc), mq.WithPrefetch(conc))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !testenv.Poll(10*time.Second, func() bool { return inFlight.Load() == conc }) {
			t.Fatalf("%s: %d handlers in flight, want %d", name, inFlight.Load(), conc)
		}
		start := time.Now()
		stopErr = c.Stop(testenv.Context(t, stopIn))
		stopTook = time.Since(start)
		t.Logf("%s: Stop(%v) returned after %v: %v; %d handled in this phase", name, stopIn, stopTook.Round(time.Millisecond), stopErr, led.counts().handled-before)
		return c, stopTook, stopErr
	}

	// A: enough time: Stop drains.
	c, took, err := phase("A (stop with 5s, handlers sleep 1s)", slow(time.Second, true), 5*time.Second)
	if err != nil || took > 3*time.Second {
		t.Errorf("A: Stop took %v and returned %v; want nil after the handlers' 1 s", took, err)
	}
	select {
	case <-c.Done():
	default:
		t.Errorf("A: Stop returned nil but the consumer is not Done")
	}
	if n := led.distinct(); n != conc {
		t.Errorf("A: %d messages handled, want the %d in flight", n, conc)
	}
	// What the consumer held unstarted (its window has room for waiting
	// deliveries too) goes back when its channel closes, and reaches the
	// count a moment later.
	var leftA int
	testenv.Poll(5*time.Second, func() bool { leftA = testenv.Count(t, b, q); return leftA+led.distinct() == total })
	if leftA+led.distinct() != total {
		t.Errorf("A: %d handled + %d left in the queue != %d published", led.distinct(), leftA, total)
	}

	// B: not enough time, handlers mind their context.
	c, took, err = phase("B (stop with 300ms, handlers sleep 3s minding ctx)", slow(3*time.Second, true), 300*time.Millisecond)
	if err == nil || took > 300*time.Millisecond+time.Second {
		t.Errorf("B: Stop took %v and returned %v; want its deadline's error at its deadline", took, err)
	}
	select {
	case <-c.Done():
	case <-time.After(5 * time.Second):
		t.Fatalf("B: the consumer was not Done 5 s after Stop cancelled its handlers")
	}
	handledB := led.distinct()
	if handledB != conc {
		t.Errorf("B: %d messages handled in all, want %d (none in B)", handledB, conc)
	}
	if !testenv.Poll(5*time.Second, func() bool { return testenv.Count(t, b, q)+handledB == total }) {
		t.Errorf("B: %d handled + %d left in the queue != %d published", handledB, testenv.Count(t, b, q), total)
	}

	// C: not enough time, handlers ignore their context.
	c, took, err = phase("C (stop with 300ms, handlers sleep 1.5s ignoring ctx)", slow(1500*time.Millisecond, false), 300*time.Millisecond)
	if err == nil || took > 300*time.Millisecond+time.Second {
		t.Errorf("C: Stop took %v and returned %v; want its deadline's error at its deadline", took, err)
	}
	select {
	case <-c.Done():
	case <-time.After(5 * time.Second):
		t.Fatalf("C: the consumer was not Done 5 s after its handlers returned")
	}

	left := map[string]bool{}
	for _, m := range testenv.GetAll(t, b, q) {
		if left[m.MessageId] {
			t.Errorf("%s is in the queue twice", m.MessageId)
		}
		left[m.MessageId] = true
	}
	overlap := 0
	for id := range left {
		if led.wasHandled(id) {
			overlap++
		}
	}
	if got := led.distinct() + len(left) - overlap; got != total {
		t.Errorf("%d handled + %d left - %d both != %d published", led.distinct(), len(left), overlap, total)
	}
	if overlap != conc {
		t.Errorf("%d messages both handled and back in the queue, want the %d that C's handlers finished after the channel closed", overlap, conc)
	}
	if n := testenv.Count(t, b, topology.DeadLetterQueue(q)); n != 0 {
		t.Errorf("%d messages dead-lettered: a stop is not a failure", n)
	}
	led.report(t, lg, func(id string) bool { return left[id] }, fmt.Sprintf("left=%d handled_and_left=%d", len(left), overlap))
}
