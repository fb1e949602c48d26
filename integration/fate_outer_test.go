//go:build integration

package integration

// The consumer's outer boundary (issue 38, defects 2, 4 and 6): what
// happens after the chain returns, what the app's outermost middleware
// sees, and a Stop under InOrder.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/internal/testenv"
	"github.com/acemq/acemq-go/middleware"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/outbox"
	"github.com/acemq/acemq-go/retry"
	"github.com/acemq/acemq-go/topology"
)

// InOrder, every wait in-process: m1 fails once and m2…m5 queue behind
// it. A Stop during m1's wait, then a new consumer: m1 must come first
// (the landed code carried it to the tail: m2 m3 m4 m5 m1).
func TestFateInOrderStopKeepsThePlace(t *testing.T) {
	for _, kind := range []struct {
		name string
		opt  topology.QueueOption
	}{{"quorum", topology.Quorum()}, {"classic", topology.Classic()}} {
		t.Run(kind.name, func(t *testing.T) {
			t.Parallel()
			b, _ := consBroker(t)
			p := retry.Fixed(3, 10*time.Second) // every wait in-process, long enough for a slow Stop
			q := testenv.Queue(t, b, p, kind.opt)
			type call struct {
				id      string
				attempt int
				run     int
			}
			var mu sync.Mutex
			var calls []call
			var run atomic.Int32
			h := mq.HandlerFunc(func(_ context.Context, d *mq.Delivery) error {
				mu.Lock()
				calls = append(calls, call{d.MessageId, d.Attempt(), int(run.Load())})
				mu.Unlock()
				if d.MessageId == "m1" && run.Load() == 1 {
					return errors.New("m1 fails in the first consumer")
				}
				return nil
			})
			start := func() *mq.Consumer {
				run.Add(1)
				c, err := b.Consume(testenv.Context(t, 20*time.Second), q, h, middleware.Standard(p), mq.InOrder())
				if err != nil {
					t.Fatal(err)
				}
				return c
			}
			var msgs []mq.Message
			for i := 1; i <= 5; i++ {
				msgs = append(msgs, mq.Message{Body: []byte("x"), MessageId: fmt.Sprintf("m%d", i)})
			}
			testenv.Publish(t, b, q, msgs...)
			c := start()
			testenv.Eventually(t, 10*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(calls) >= 1 }, "m1's first call")
			time.Sleep(300 * time.Millisecond) // inside m1's wait
			testenv.Stop(t, c)
			c = start()
			defer testenv.Stop(t, c)
			second := func() []call {
				mu.Lock()
				defer mu.Unlock()
				var out []call
				for _, cl := range calls {
					if cl.run == 2 {
						out = append(out, cl)
					}
				}
				return out
			}
			testenv.Eventually(t, 15*time.Second, func() bool { return len(second()) >= 5 }, "5 calls in the second consumer")
			got := second()
			var ids []string
			for _, cl := range got {
				ids = append(ids, cl.id)
			}
			mu.Lock()
			t.Logf("%s, %s: calls %v", testenv.BrokerVersion(t), kind.name, calls)
			mu.Unlock()
			if want := []string{"m1", "m2", "m3", "m4", "m5"}; !slices.Equal(ids, want) {
				t.Errorf("after a Stop in m1's wait the new consumer handled %v, want %v: InOrder lost the order", ids, want)
			}
			if got[0].id == "m1" && got[0].attempt != 1 {
				// The documented cost: a wait cut short under InOrder does
				// not record the attempt it ended (as a kill -9 does not).
				t.Errorf("m1 came back as attempt %d, want 1 (its cut attempt run again)", got[0].attempt)
			}
			if n := testenv.Count(t, b, q); n != 0 {
				t.Errorf("%d messages left in %s", n, q)
			}
		})
	}
}

// A middleware outside Standard panics after the chain returns. The
// message is already confirmed in .dlq: the original is acknowledged, the
// panic logged, and nothing is handled or dead-lettered again (the landed
// code recovered it as a requeue: 9 handler calls on a 2-attempt policy
// and 8 copies in .dlq in 8 s, growing).
func TestFatePanicAfterConfirmedHopAcknowledges(t *testing.T) {
	t.Parallel()
	lg := testenv.NewLogRecorder(t, "acemq.handler.panic") // a stack each: kept out of the test log
	b := testenv.Broker(t, mq.Config{Logger: lg.Logger()})
	p := retry.Fixed(2, 50*time.Millisecond)
	q := testenv.Queue(t, b, p)
	dlq := topology.DeadLetterQueue(q)
	var calls atomic.Int32
	h := mq.HandlerFunc(func(context.Context, *mq.Delivery) error {
		calls.Add(1)
		return errors.New("always fails")
	})
	panicky := func(next mq.Handler) mq.Handler {
		return mq.HandlerFunc(func(ctx context.Context, d *mq.Delivery) error {
			err := next.Handle(ctx, d)
			if d != nil {
				panic(fmt.Sprintf("outer middleware broke after %s", d.Outcome()))
			}
			return err
		})
	}
	c, err := b.Consume(testenv.Context(t, 20*time.Second), q, h,
		mq.WithMiddleware(panicky), middleware.Standard(p), mq.WithRequeuePause(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer testenv.Stop(t, c)
	testenv.Publish(t, b, q, mq.Message{Body: []byte("x"), MessageId: "panics-after"})
	testenv.WaitCount(t, b, dlq, 1, 15*time.Second)
	time.Sleep(3 * time.Second) // room for the loop the landed code ran
	if n := testenv.Count(t, b, dlq); n != 1 {
		t.Errorf("%d copies in %s, want 1: a panic after a confirmed hop undid it", n, dlq)
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("%d handler calls on a 2-attempt policy, want 2", n)
	}
	if n := testenv.Count(t, b, q); n != 0 {
		t.Errorf("%d messages back in %s, want 0", n, q)
	}
	if n := lg.Count("acemq.handler.panic"); n != 1 {
		t.Errorf("the panic was logged %d times, want 1 (events: %s)", n, lg.Events())
	}
}

// outerSeen is what the app's outermost middleware saw of each delivery,
// against what the consumer received and settled (a DeliveryHook).
type outerSeen struct {
	mu        sync.Mutex
	received  int
	passed    int
	empty     int      // next returned with d.Outcome() empty
	differs   []string // outer's outcome vs the settled one
	outcomes  []mq.Outcome
	seenByPtr map[*mq.Delivery]mq.Outcome
}

func (o *outerSeen) OnDelivery(ctx context.Context, d *mq.Delivery) context.Context {
	o.mu.Lock()
	o.received++
	o.mu.Unlock()
	return ctx
}

func (o *outerSeen) OnDeliveryDone(_ context.Context, d *mq.Delivery, _ error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.outcomes = append(o.outcomes, d.Outcome())
	if seen, ok := o.seenByPtr[d]; ok && seen != d.Outcome() {
		o.differs = append(o.differs, fmt.Sprintf("outer saw %q, settled %q", seen, d.Outcome()))
	}
}

func (o *outerSeen) middleware(next mq.Handler) mq.Handler {
	return mq.HandlerFunc(func(ctx context.Context, d *mq.Delivery) error {
		err := next.Handle(ctx, d)
		o.mu.Lock()
		defer o.mu.Unlock()
		o.passed++
		if d.Outcome() == "" {
			o.empty++
		}
		if o.seenByPtr == nil {
			o.seenByPtr = map[*mq.Delivery]mq.Outcome{}
		}
		o.seenByPtr[d] = d.Outcome()
		return err
	})
}

func (o *outerSeen) counts() (received, passed int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.received, o.passed
}

// check fails t unless the rule held for every delivery: each passed the
// outer middleware, which read a set outcome, the one settled. It returns
// how many deliveries the consumer received.
func (o *outerSeen) check(t *testing.T) int {
	t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.passed != o.received {
		t.Errorf("the outer middleware saw %d of %d deliveries", o.passed, o.received)
	}
	if o.empty > 0 {
		t.Errorf("next returned %d time(s) with an empty Outcome()", o.empty)
	}
	if len(o.differs) > 0 {
		t.Errorf("the outer middleware's outcome differed from the settled one: %v", o.differs)
	}
	return o.received
}

// refusingQueue declares q on b so that it refuses every publish (the
// broker nacks it): x-max-length 0, reject-publish.
func refusingQueue(t *testing.T, b *mq.Broker, q string) {
	t.Helper()
	ch, err := b.Channel(testenv.Context(t, 15*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	if _, err := ch.QueueDeclare(q, true, false, false, false,
		amqp.Table{"x-max-length": int32(0), "x-overflow": "reject-publish"}); err != nil {
		t.Fatalf("declare %s refusing: %v", q, err)
	}
}

// A .dlq that refuses every hop: each redelivery of the message makes the
// set-aside again. Every one of those deliveries passes the app's outer
// middleware, with the outcome the consumer settled (the landed code
// skipped the chain for them: the middleware saw 1 of 6 deliveries).
func TestFateOuterSeesRepeatedSetAsides(t *testing.T) {
	t.Parallel()
	seen := &outerSeen{}
	lg := testenv.NewLogRecorder(t)
	b := testenv.Broker(t, mq.Config{Logger: lg.Logger(), Hooks: []any{seen}})
	p := retry.Waits(10*time.Millisecond, 10*time.Millisecond)
	q := testenv.Queue(t, b, p, topology.Classic())
	refusingQueue(t, b, topology.DeadLetterQueue(q))
	var calls atomic.Int32
	h := mq.HandlerFunc(func(context.Context, *mq.Delivery) error {
		calls.Add(1)
		return errors.New("always fails")
	})
	c, err := b.Consume(testenv.Context(t, 20*time.Second), q, h, mq.WithMiddleware(seen.middleware),
		middleware.Standard(p, middleware.WithoutDeclare()), mq.WithRequeuePause(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	testenv.Publish(t, b, q, mq.Message{Body: []byte("x"), MessageId: "refused-aside"})
	if !testenv.Poll(20*time.Second, func() bool { return lg.Count(mq.EventSetAsideFailed) >= 4 }) {
		t.Fatalf("%d refused set-asides within 20 s, want 4 (events: %s)", lg.Count(mq.EventSetAsideFailed), lg.Events())
	}
	testenv.Stop(t, c)
	received := seen.check(t)
	t.Logf("received %d, handler calls %d", received, calls.Load())
	if n := calls.Load(); n != 3 {
		t.Errorf("%d handler calls on a 3-attempt policy, want 3", n)
	}
}

// The inbox (PostgreSQL) suppresses a duplicate without calling the
// handler. The app's outer middleware reads the ack the consumer makes,
// and Logging writes the same (the landed code returned nil with an empty
// Outcome() while Logging wrote outcome=ack).
func TestFateOuterSeesInboxDuplicate(t *testing.T) {
	seen := &outerSeen{}
	lg := testenv.NewLogRecorder(t, "acemq.message.settled", outbox.EventDuplicate)
	db := outboxOpen(t, outboxURL())
	s := outboxTables(t, db)
	b := testenv.Broker(t, mq.Config{Logger: lg.Logger(), Hooks: []any{seen}})
	p := retry.Waits(50 * time.Millisecond)
	q := testenv.Queue(t, b, p, topology.Classic())
	var calls atomic.Int32
	c, err := b.Consume(testenv.Context(t, time.Minute), q, mq.HandlerFunc(func(context.Context, *mq.Delivery) error {
		calls.Add(1)
		return nil
	}), mq.WithMiddleware(seen.middleware), middleware.Standard(p),
		mq.WithMiddleware(outbox.Inbox(db, outbox.WithSchema(s))))
	if err != nil {
		t.Fatal(err)
	}
	testenv.Publish(t, b, q, mq.Message{MessageId: "dup-1", Body: []byte("a")}, mq.Message{MessageId: "dup-1", Body: []byte("a")})
	testenv.Eventually(t, 20*time.Second, func() bool {
		_, passed := seen.counts()
		return passed == 2 && lg.Count(outbox.EventDuplicate) == 1
	}, "two deliveries, one a duplicate")
	testenv.Stop(t, c)
	if n := seen.check(t); n != 2 {
		t.Errorf("%d deliveries, want 2", n)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("the handler ran %d times, want 1", n)
	}
	for _, r := range lg.All("acemq.message.settled") {
		if got := r.Attrs["outcome"]; got != string(mq.OutcomeAck) {
			t.Errorf("Logging wrote outcome=%v, want ack", got)
		}
	}
	seen.mu.Lock()
	defer seen.mu.Unlock()
	for d, o := range seen.seenByPtr {
		if o != mq.OutcomeAck {
			t.Errorf("the outer middleware read %q for %s, want ack", o, d.MessageId)
		}
	}
}

// Every path a delivery can take with a real consumer: the app's outer
// middleware sees each delivery once, and when next returns, d.Outcome()
// is the outcome the consumer settled it with (DeliveryHook) and the one
// Logging wrote.
func TestFateOuterSeesWhatWasCarriedOut(t *testing.T) {
	t.Parallel()
	seen := &outerSeen{}
	lg := testenv.NewLogRecorder(t, "acemq.message.settled")
	b := testenv.Broker(t, mq.Config{Logger: lg.Logger(), Hooks: []any{seen}})
	// Attempt 1 waits in-process, attempt 2 goes through the 1 s rung,
	// attempt 3 is the last.
	p := retry.Waits(50*time.Millisecond, time.Second).With(retry.InProcessLimit(500 * time.Millisecond))
	q := testenv.Queue(t, b, p)
	h := mq.HandlerFunc(func(_ context.Context, d *mq.Delivery) error {
		switch d.MessageId {
		case "retry-then-ack":
			if d.Attempt() == 1 {
				return errors.New("fails once")
			}
		case "rung-then-dlq":
			return errors.New("always fails")
		case "park":
			return middleware.Park(errors.New("a person must look"))
		case "requeue-then-ack":
			if !d.Redelivered {
				return mq.Requeue(errors.New("a dependency is down"))
			}
		}
		return nil
	})
	c, err := b.Consume(testenv.Context(t, 20*time.Second), q, h, mq.WithMiddleware(seen.middleware),
		middleware.Standard(p), mq.WithRequeuePause(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ids := []string{"ack", "retry-then-ack", "rung-then-dlq", "park", "requeue-then-ack"}
	var msgs []mq.Message
	for _, id := range ids {
		msgs = append(msgs, mq.Message{MessageId: id, Body: []byte(id)})
	}
	testenv.Publish(t, b, q, msgs...)
	// ack, ack, retry + dead-letter, park, requeue + ack: 7 deliveries.
	testenv.Eventually(t, 20*time.Second, func() bool { r, _ := seen.counts(); return r == 7 }, "7 deliveries")
	testenv.WaitCount(t, b, topology.DeadLetterQueue(q), 1, 10*time.Second)
	testenv.Stop(t, c)
	seen.check(t)
	count := func(os []mq.Outcome) map[mq.Outcome]int {
		m := map[mq.Outcome]int{}
		for _, o := range os {
			m[o]++
		}
		return m
	}
	seen.mu.Lock()
	settled := count(seen.outcomes)
	seen.mu.Unlock()
	want := map[mq.Outcome]int{mq.OutcomeAck: 3, mq.OutcomeRetry: 1, mq.OutcomeDeadLetter: 1, mq.OutcomePark: 1, mq.OutcomeRequeue: 1}
	if fmt.Sprint(settled) != fmt.Sprint(want) {
		t.Errorf("settled %v, want %v", settled, want)
	}
	var logged []mq.Outcome
	for _, r := range lg.All("acemq.message.settled") {
		logged = append(logged, mq.Outcome(r.Attrs["outcome"]))
	}
	if fmt.Sprint(count(logged)) != fmt.Sprint(settled) {
		t.Errorf("Logging wrote %v, the consumer settled %v", count(logged), settled)
	}
}
