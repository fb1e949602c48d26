//go:build integration

package integration

// Issue 10, "Done when": the retry ladder under real traffic. A failing
// message never stalls its queue, never forgets its attempts, and keeps
// where it came from; hops copy only what is safe to copy; no panic loses a
// message.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/internal/testenv"
	"github.com/acemq/acemq-go/middleware"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/ops"
	"github.com/acemq/acemq-go/retry"
	"github.com/acemq/acemq-go/topology"
)

// Default options, Exponential(3, 2s): one always-failing message, then 20
// healthy ones 50 ms apart. Every healthy message is handled within 1 s of
// its publish: the failing one's in-process waits hold no worker.
func TestLadderFailingMessageDoesNotStallItsQueue(t *testing.T) {
	t.Parallel()
	b, lg := consBroker(t)
	p := retry.Exponential(3, 2*time.Second)
	q := testenv.Queue(t, b, p)
	var mu sync.Mutex
	handled := map[string]time.Time{}
	var failing atomic.Int32
	h := mq.HandlerFunc(func(_ context.Context, d *mq.Delivery) error {
		if d.MessageId == "bad" {
			failing.Add(1)
			return errors.New("always fails")
		}
		mu.Lock()
		handled[d.MessageId] = time.Now()
		mu.Unlock()
		return nil
	})
	c, err := b.Consume(testenv.Context(t, 20*time.Second), q, h, middleware.Standard(p))
	if err != nil {
		t.Fatal(err)
	}
	defer testenv.Stop(t, c)
	pub := b.Publisher("")
	defer pub.Close()
	ctx := testenv.Context(t, 30*time.Second)
	if err := pub.Publish(ctx, q, mq.Message{Body: []byte("bad"), MessageId: "bad"}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, func() bool { return failing.Load() >= 1 }, "the failing message was not handled")
	published := map[string]time.Time{}
	for i := range 20 {
		id := fmt.Sprintf("ok-%d", i)
		published[id] = time.Now()
		if err := pub.Publish(ctx, q, mq.Message{Body: []byte("ok"), MessageId: id}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	testenv.Eventually(t, 10*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(handled) == 20 },
		"20 healthy messages handled")
	mu.Lock()
	defer mu.Unlock()
	var worst time.Duration
	for id, at := range handled {
		lag := at.Sub(published[id])
		worst = max(worst, lag)
		if lag > time.Second {
			t.Errorf("%s was handled %v after its publish, want within 1 s", id, lag.Round(time.Millisecond))
		}
	}
	t.Logf("worst lag of a healthy message behind a failing one: %v", worst.Round(time.Millisecond))
	// The failing message still runs its whole ladder: 3 attempts, then .dlq.
	testenv.WaitCount(t, b, topology.DeadLetterQueue(q), 1, 15*time.Second)
	if n := failing.Load(); n != 3 {
		t.Errorf("the failing message was handled %d times, want 3", n)
	}
	// Its three attempts are one delivery to the middleware around the
	// ladder: one Logging record.
	testenv.Stop(t, c) // the record is written once the delivery is settled
	var records int
	for _, r := range lg.All("acemq.message.settled") {
		if r.Attrs["message_id"] == "bad" {
			records++
		}
	}
	if records != 1 {
		t.Errorf("%d acemq.message.settled records for the failing message, want 1", records)
	}
}

// 1000 messages, every 20th failing once, Exponential(3, 1s): all handled
// within 5 s (50 s on the landed code: each wait held the only worker).
func TestLadderThousandMessagesOneInTwentyFailingOnce(t *testing.T) {
	t.Parallel()
	b, _ := consBroker(t)
	p := retry.Exponential(3, time.Second)
	q := testenv.Queue(t, b, p)
	const n = 1000
	var mu sync.Mutex
	seen := map[string]int{}
	done := map[string]bool{}
	h := mq.HandlerFunc(func(_ context.Context, d *mq.Delivery) error {
		mu.Lock()
		defer mu.Unlock()
		seen[d.MessageId]++
		var i int
		fmt.Sscanf(d.MessageId, "m-%d", &i)
		if i%20 == 0 && seen[d.MessageId] == 1 {
			return errors.New("fails once")
		}
		done[d.MessageId] = true
		return nil
	})
	testenv.Publish(t, b, q, consMessages("m", n)...)
	start := time.Now()
	c, err := b.Consume(testenv.Context(t, 20*time.Second), q, h, middleware.Standard(p))
	if err != nil {
		t.Fatal(err)
	}
	defer testenv.Stop(t, c)
	ok := testenv.Poll(5*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(done) == n })
	took := time.Since(start)
	mu.Lock()
	got := len(done)
	mu.Unlock()
	if !ok {
		t.Fatalf("%d of %d messages handled after %v, want all within 5 s", got, n, took.Round(time.Millisecond))
	}
	t.Logf("%d messages, %d failing once, all handled in %v", n, n/20, took.Round(time.Millisecond))
	testenv.Stop(t, c)
	if m := testenv.Count(t, b, q); m != 0 {
		t.Errorf("%s holds %d messages after all were handled", q, m)
	}
}

// mq.InOrder keeps the landed, blocking behaviour: a failing message's
// in-process waits hold the worker, so nothing overtakes it.
func TestLadderInOrderKeepsTheQueuesOrder(t *testing.T) {
	t.Parallel()
	b, _ := consBroker(t)
	p := retry.Exponential(3, 300*time.Millisecond)
	q := testenv.Queue(t, b, p)
	var mu sync.Mutex
	var order []string
	h := mq.HandlerFunc(func(_ context.Context, d *mq.Delivery) error {
		mu.Lock()
		defer mu.Unlock()
		if d.MessageId == "m-0" && d.Attempt() < 3 {
			return errors.New("fails twice")
		}
		order = append(order, d.MessageId)
		return nil
	})
	testenv.Publish(t, b, q, consMessages("m", 10)...)
	c, err := b.Consume(testenv.Context(t, 20*time.Second), q, h, middleware.Standard(p), mq.InOrder())
	if err != nil {
		t.Fatal(err)
	}
	defer testenv.Stop(t, c)
	testenv.Eventually(t, 10*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(order) == 10 }, "10 handled")
	mu.Lock()
	defer mu.Unlock()
	want := []string{"m-0", "m-1", "m-2", "m-3", "m-4", "m-5", "m-6", "m-7", "m-8", "m-9"}
	if !slices.Equal(order, want) {
		t.Errorf("handled in order %v, want %v", order, want)
	}
}

// Exponential(5, 1s), every wait in-process, the handler always failing,
// the consumer stopped and started again during each of the 4 waits: the
// message is in .dlq after exactly 5 handler calls, attempts 1 to 5 (the
// landed code made 9 calls, 1,2,3 / 1,2,3 / 1,2,3, and never set it aside).
func TestLadderAttemptsSurviveStopDuringWaits(t *testing.T) {
	t.Parallel()
	b, _ := consBroker(t)
	p := retry.Exponential(5, time.Second)
	q := testenv.Queue(t, b, p)
	calls := &consCalls{}
	h := mq.HandlerFunc(func(_ context.Context, d *mq.Delivery) error {
		calls.add(d)
		return errors.New("always fails")
	})
	start := func() *mq.Consumer {
		c, err := b.Consume(testenv.Context(t, 20*time.Second), q, h, middleware.Standard(p))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	testenv.Publish(t, b, q, mq.Message{Body: []byte("x"), MessageId: "stopped"})
	c := start()
	for i := 1; i <= 4; i++ {
		testenv.Eventually(t, 10*time.Second, func() bool { return calls.n() >= i }, "call %d", i)
		time.Sleep(200 * time.Millisecond) // inside the wait after attempt i
		testenv.Stop(t, c)
		c = start()
	}
	defer func() { testenv.Stop(t, c) }()
	testenv.WaitCount(t, b, topology.DeadLetterQueue(q), 1, 20*time.Second)
	time.Sleep(300 * time.Millisecond)
	_, attempts := calls.snapshot()
	if !slices.Equal(attempts, []int{1, 2, 3, 4, 5}) {
		t.Errorf("the handler saw attempts %v, want exactly [1 2 3 4 5]", attempts)
	}
}

// The same with the connection cut during each wait, on a quorum queue: in
// .dlq after at most 5 + 4 handler calls.
func TestLadderAttemptsSurviveConnectionCutsDuringWaits(t *testing.T) {
	t.Parallel()
	proxy, url := testenv.Proxy(t)
	b, _ := consBroker(t, url)
	p := retry.Exponential(5, time.Second)
	q := testenv.Queue(t, b, p) // quorum by default
	calls := &consCalls{}
	h := mq.HandlerFunc(func(_ context.Context, d *mq.Delivery) error {
		calls.add(d)
		return errors.New("always fails")
	})
	c, err := b.Consume(testenv.Context(t, 20*time.Second), q, h, middleware.Standard(p))
	if err != nil {
		t.Fatal(err)
	}
	defer testenv.Stop(t, c)
	testenv.Publish(t, b, q, mq.Message{Body: []byte("x"), MessageId: "cut"})
	// Cut the connection in every wait, as long as the message keeps
	// waiting: a consumer that forgets its attempts never gets to .dlq.
	for i := 1; i <= 8; i++ {
		if !testenv.Poll(20*time.Second, func() bool { return calls.n() >= i }) || testenv.Count(t, b, topology.DeadLetterQueue(q)) == 1 {
			break
		}
		time.Sleep(200 * time.Millisecond)
		if testenv.Count(t, b, topology.DeadLetterQueue(q)) == 1 {
			break
		}
		proxy.Cut()
	}
	testenv.WaitCount(t, b, topology.DeadLetterQueue(q), 1, 30*time.Second)
	_, attempts := calls.snapshot()
	t.Logf("attempts seen with a cut in every wait: %v", attempts)
	if len(attempts) > 9 {
		t.Errorf("%d handler calls before .dlq, want at most 5+4", len(attempts))
	}
}

// Published to a topic exchange with key order.placed and retried through a
// 1 s rung: on attempt 2 the handler reads order.placed and the exchange
// from the Delivery; the .dlq copy carries both; a replayed message still
// does.
func TestLadderKeepsWhereTheMessageCameFrom(t *testing.T) {
	t.Parallel()
	b, lg := consBroker(t)
	p := retry.Waits(time.Second).With(retry.InProcessLimit(0))
	q := testenv.Name(t)
	ex := testenv.Name(t, "events")
	testenv.CleanupDerived(t, q, p)
	testenv.CleanupExchanges(t, ex)
	top := topology.New().Exchange(ex, topology.Topic).
		Queue(q, topology.Retry(p)).
		Binding(q, ex, "order.placed").Binding(q, ex, "order.cancelled")
	if err := b.Declare(testenv.Context(t, 15*time.Second), top); err != nil {
		t.Fatal(err)
	}
	type seen struct{ exchange, key string }
	var mu sync.Mutex
	var got []seen
	h := mq.HandlerFunc(func(_ context.Context, d *mq.Delivery) error {
		mu.Lock()
		got = append(got, seen{d.Exchange, d.RoutingKey})
		mu.Unlock()
		return errors.New("fails")
	})
	c, err := b.Consume(testenv.Context(t, 20*time.Second), q, h, middleware.Standard(p))
	if err != nil {
		t.Fatal(err)
	}
	pub := b.Publisher(ex)
	defer pub.Close()
	if err := pub.Publish(testenv.Context(t, 10*time.Second), "order.placed", mq.Message{Body: []byte("{}"), MessageId: "o-1"}); err != nil {
		t.Fatal(err)
	}
	testenv.WaitCount(t, b, topology.DeadLetterQueue(q), 1, 15*time.Second)
	testenv.Stop(t, c)
	for _, r := range lg.All("acemq.message.settled") {
		if r.Attrs["routing_key"] != "order.placed" {
			t.Errorf("Logging names routing key %q, want the original order.placed", r.Attrs["routing_key"])
		}
	}
	mu.Lock()
	if want := []seen{{ex, "order.placed"}, {ex, "order.placed"}}; !slices.Equal(got, want) {
		t.Errorf("the handler read %v, want %v on both attempts", got, want)
	}
	mu.Unlock()
	ch, err := b.Channel(testenv.Context(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	dl, ok, err := ch.Get(topology.DeadLetterQueue(q), false)
	if err != nil || !ok {
		t.Fatalf("get .dlq: %v %v", ok, err)
	}
	if dl.Headers[mq.HeaderOriginalExchange] != ex || dl.Headers[mq.HeaderOriginalRoutingKey] != "order.placed" {
		t.Errorf(".dlq copy headers %v, want the original exchange %s and key order.placed", dl.Headers, ex)
	}
	_ = dl.Nack(false, true)
	// Replay it and read it from the source queue: the origin is still there.
	if _, err := ops.Replay(testenv.Context(t, 15*time.Second), b, topology.DeadLetterQueue(q), ops.ReplayOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.WaitCount(t, b, q, 1, 5*time.Second)
	rp, ok, err := ch.Get(q, true)
	if err != nil || !ok {
		t.Fatalf("get replayed: %v %v", ok, err)
	}
	if rp.Headers[mq.HeaderOriginalExchange] != ex || rp.Headers[mq.HeaderOriginalRoutingKey] != "order.placed" {
		t.Errorf("replayed copy headers %v, want the original exchange and key", rp.Headers)
	}
}

// A hop's copy is the original minus what would make it vanish, multiply or
// be refused: a per-message expiration, CC, a user_id of another login.
func TestLadderHopsDropExpirationCCAndForeignUserID(t *testing.T) {
	t.Parallel()
	p := retry.Waits(time.Second).With(retry.InProcessLimit(0))

	t.Run("expiration", func(t *testing.T) {
		t.Parallel()
		// Waits in-process, then .dlq: the dead letter must outlive the
		// original's 3 s expiration.
		b, _ := consBroker(t)
		inProcess := retry.Exponential(2, 100*time.Millisecond)
		q := testenv.Queue(t, b, inProcess)
		var calls consCalls
		c, err := b.Consume(testenv.Context(t, 20*time.Second), q, mq.HandlerFunc(func(_ context.Context, d *mq.Delivery) error {
			calls.add(d)
			return errors.New("fails")
		}), middleware.Standard(inProcess))
		if err != nil {
			t.Fatal(err)
		}
		defer testenv.Stop(t, c)
		testenv.Publish(t, b, q, mq.Message{Body: []byte("x"), MessageId: "exp", Expiration: "3000"})
		testenv.WaitCount(t, b, topology.DeadLetterQueue(q), 1, 15*time.Second)
		time.Sleep(4 * time.Second) // past the message's own expiration
		if n := testenv.Count(t, b, topology.DeadLetterQueue(q)); n != 1 {
			t.Errorf(".dlq holds %d messages 4 s later, want 1: the dead letter expired", n)
		}
		if n := calls.n(); n != 2 {
			t.Errorf("%d calls, want 2", n)
		}
	})

	t.Run("expiration on a rung", func(t *testing.T) {
		t.Parallel()
		// A 3 s rung must hold the message 3 s, not the 1 s it expires in.
		b, _ := consBroker(t)
		rung := retry.Waits(3 * time.Second).With(retry.InProcessLimit(0))
		q := testenv.Queue(t, b, rung)
		var calls consCalls
		c, err := b.Consume(testenv.Context(t, 20*time.Second), q, mq.HandlerFunc(func(_ context.Context, d *mq.Delivery) error {
			calls.add(d)
			return errors.New("fails")
		}), middleware.Standard(rung))
		if err != nil {
			t.Fatal(err)
		}
		defer testenv.Stop(t, c)
		testenv.Publish(t, b, q, mq.Message{Body: []byte("x"), MessageId: "exp-rung", Expiration: "1000"})
		testenv.Eventually(t, 15*time.Second, func() bool { return calls.n() == 2 }, "2 calls")
		at, _ := calls.snapshot()
		if w := at[1].Sub(at[0]); w < 2900*time.Millisecond {
			t.Errorf("the 3 s rung brought the message home after %v: its own expiration cut the wait", w.Round(time.Millisecond))
		}
	})

	t.Run("cc", func(t *testing.T) {
		t.Parallel()
		b, _ := consBroker(t)
		q := testenv.Queue(t, b, p)
		other := testenv.Queue(t, b, retry.Policy{})
		c, err := b.Consume(testenv.Context(t, 20*time.Second), q, mq.HandlerFunc(func(context.Context, *mq.Delivery) error {
			return errors.New("fails")
		}), middleware.Standard(p))
		if err != nil {
			t.Fatal(err)
		}
		defer testenv.Stop(t, c)
		testenv.Publish(t, b, q, mq.Message{Body: []byte("x"), MessageId: "cc", Headers: amqp.Table{"CC": []any{other}}})
		testenv.WaitCount(t, b, topology.DeadLetterQueue(q), 1, 15*time.Second)
		time.Sleep(300 * time.Millisecond)
		if n := testenv.Count(t, b, other); n != 1 {
			t.Errorf("%s holds %d copies, want only the publish's own 1", other, n)
		}
		if n := testenv.Count(t, b, topology.DeadLetterQueue(q)); n != 1 {
			t.Errorf(".dlq holds %d, want 1", n)
		}
	})

	t.Run("foreign user_id", func(t *testing.T) {
		t.Parallel()
		user := testenv.Name(t, "user")
		ctx := testenv.Context(t, 30*time.Second)
		for _, args := range [][]string{{"add_user", user, "pw-" + user}, {"set_permissions", "-p", "/", user, ".*", ".*", ".*"}} {
			if out, err := testenv.Rabbitmqctl(ctx, "", args...); err != nil {
				t.Fatalf("rabbitmqctl %v: %v %s", args, err, out)
			}
		}
		t.Cleanup(func() { _, _ = testenv.Rabbitmqctl(context.Background(), "", "delete_user", user) })
		// The publisher logs in as the new user and stamps its own user_id
		// (the broker checks it); the consumer is guest, which may not claim it.
		pubB := testenv.Broker(t, mq.Config{URLs: []string{strings.Replace(testenv.URL(), "guest:guest", user+":pw-"+user, 1)}})
		b, _ := consBroker(t)
		q := testenv.Queue(t, b, p)
		var calls consCalls
		c, err := b.Consume(testenv.Context(t, 20*time.Second), q, mq.HandlerFunc(func(_ context.Context, d *mq.Delivery) error {
			calls.add(d)
			return errors.New("fails")
		}), middleware.Standard(p))
		if err != nil {
			t.Fatal(err)
		}
		defer testenv.Stop(t, c)
		testenv.Publish(t, pubB, q, mq.Message{Body: []byte("x"), MessageId: "uid", UserId: user})
		testenv.WaitCount(t, b, topology.DeadLetterQueue(q), 1, 15*time.Second)
		if n := calls.n(); n != 2 {
			t.Errorf("%d handler calls, want 2 (attempt, one rung, .dlq); the hop looped", n)
		}
	})
}

// A classifier that panics, on a queue with Retry and no DeadLetter: the
// message is not lost (the landed runtime rejected it without requeue,
// into a queue with no dead-letter route).
func TestLadderPanickingClassifierLosesNothing(t *testing.T) {
	t.Parallel()
	b, lg := consBroker(t)
	p := retry.Exponential(2, 100*time.Millisecond)
	q := testenv.Queue(t, b, p, topology.Retry(p))
	panicky := func(error) mq.Outcome { panic("classifier bug") }
	var calls consCalls
	c, err := b.Consume(testenv.Context(t, 20*time.Second), q, mq.HandlerFunc(func(_ context.Context, d *mq.Delivery) error {
		calls.add(d)
		return errors.New("fails")
	}), middleware.Standard(p, middleware.WithClassifier(panicky)))
	if err != nil {
		t.Fatal(err)
	}
	defer testenv.Stop(t, c)
	testenv.Publish(t, b, q, mq.Message{Body: []byte("x"), MessageId: "panic"})
	testenv.WaitCount(t, b, topology.DeadLetterQueue(q), 1, 15*time.Second)
	_, attempts := calls.snapshot()
	if !slices.Equal(attempts, []int{1, 2}) {
		t.Errorf("attempts %v, want [1 2]: a classifier's panic is a failed attempt", attempts)
	}
	if n := lg.Count("acemq.message.rejected"); n != 0 {
		t.Errorf("%d rejections; a panic must never reject", n)
	}
}

// A panic in a middleware of the user's outside the standard stack, on a
// queue with Retry and no DeadLetter: the runtime returns the message to
// its queue after the pause (an event says so), never rejects it.
func TestLadderPanicOutsideEveryMiddlewareIsRequeued(t *testing.T) {
	t.Parallel()
	b, lg := consBroker(t)
	p := retry.Exponential(2, 100*time.Millisecond)
	q := testenv.Queue(t, b, p, topology.Retry(p))
	var panics atomic.Int32
	outer := func(next mq.Handler) mq.Handler {
		return mq.HandlerFunc(func(ctx context.Context, d *mq.Delivery) error {
			if panics.Add(1) == 1 {
				panic("outer middleware bug")
			}
			return next.Handle(ctx, d)
		})
	}
	var calls consCalls
	c, err := b.Consume(testenv.Context(t, 20*time.Second), q, mq.HandlerFunc(func(_ context.Context, d *mq.Delivery) error {
		calls.add(d)
		return nil
	}), mq.WithMiddleware(outer), middleware.Standard(p), mq.WithRequeuePause(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer testenv.Stop(t, c)
	testenv.Publish(t, b, q, mq.Message{Body: []byte("x"), MessageId: "outer-panic"})
	testenv.Eventually(t, 10*time.Second, func() bool { return calls.n() == 1 }, "the message was not handled after the panic")
	if n := lg.Count(mq.EventRequeued); n != 1 {
		t.Errorf("%d %s records, want 1", n, mq.EventRequeued)
	}
	if n := lg.Count("acemq.message.rejected"); n != 0 {
		t.Errorf("%d rejections; a panic must never reject", n)
	}
}

// Waiting deliveries free their worker but never raise the concurrency:
// with WithConcurrency(2) and every message failing once, at most 2
// handler calls run at once.
func TestLadderWaitsKeepTheConcurrency(t *testing.T) {
	t.Parallel()
	b, _ := consBroker(t)
	p := retry.Exponential(2, 200*time.Millisecond)
	q := testenv.Queue(t, b, p)
	var running, most atomic.Int32
	var mu sync.Mutex
	seen := map[string]int{}
	handled := 0
	c, err := b.Consume(testenv.Context(t, 20*time.Second), q, mq.HandlerFunc(func(_ context.Context, d *mq.Delivery) error {
		n := running.Add(1)
		defer running.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		time.Sleep(5 * time.Millisecond)
		mu.Lock()
		defer mu.Unlock()
		seen[d.MessageId]++
		if seen[d.MessageId] == 1 {
			return errors.New("fails once")
		}
		handled++
		return nil
	}), middleware.Standard(p), mq.WithConcurrency(2))
	if err != nil {
		t.Fatal(err)
	}
	defer testenv.Stop(t, c)
	testenv.Publish(t, b, q, consMessages("conc", 60)...)
	testenv.Eventually(t, 15*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return handled == 60 }, "60 handled")
	if m := most.Load(); m > 2 {
		t.Errorf("%d handler calls ran at once, want at most the concurrency 2", m)
	}
}

// Past WithMaxWaiting, waiting deliveries take their room from the
// prefetch window (the documented bound): with a prefetch of 2, no extra
// room, and two messages waiting, the broker sends nothing more until a
// wait ends.
func TestLadderPastMaxWaitingWaitsTakeTheWindow(t *testing.T) {
	t.Parallel()
	b, _ := consBroker(t)
	p := retry.Exponential(2, time.Second)
	q := testenv.Queue(t, b, p)
	var mu sync.Mutex
	at := map[string]time.Time{}
	c, err := b.Consume(testenv.Context(t, 20*time.Second), q, mq.HandlerFunc(func(_ context.Context, d *mq.Delivery) error {
		mu.Lock()
		defer mu.Unlock()
		if strings.HasPrefix(d.MessageId, "bad") && d.Attempt() == 1 {
			return errors.New("fails once")
		}
		at[d.MessageId] = time.Now()
		return nil
	}), middleware.Standard(p), mq.WithPrefetch(2), mq.WithMaxWaiting(0))
	if err != nil {
		t.Fatal(err)
	}
	defer testenv.Stop(t, c)
	start := time.Now()
	testenv.Publish(t, b, q, mq.Message{Body: []byte("x"), MessageId: "bad-1"}, mq.Message{Body: []byte("x"), MessageId: "bad-2"},
		mq.Message{Body: []byte("x"), MessageId: "ok"})
	testenv.Eventually(t, 10*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(at) == 3 }, "3 handled")
	mu.Lock()
	defer mu.Unlock()
	if lag := at["ok"].Sub(start); lag < 900*time.Millisecond {
		t.Errorf("the healthy message was handled %v after the publish: the waiting deliveries did not fill the window", lag)
	}
}

// A set-aside that keeps failing (here: .parked does not exist) returns the
// message to its queue again and again; each return is visible
// (acemq.message.requeued, with the broker's delivery count), and on a
// quorum queue with a delivery limit the broker ends the loop by
// dead-lettering it (up to 4.2, which count every return; 4.3 does not
// count a failed set-aside's basic.nack and keeps the message until it can
// be set aside). RabbitMQ 4.x gives every quorum queue a limit of 20; 3.10
// has none, so the test sets x-delivery-limit itself.
func TestLadderRequeueLoopIsVisibleAndBoundedByTheDeliveryLimit(t *testing.T) {
	t.Parallel()
	b, lg := consBroker(t)
	q := testenv.Name(t)
	dlq := topology.DeadLetterQueue(q)
	testenv.Cleanup(t, q, dlq)
	ch, err := b.Channel(testenv.Context(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	if err := ch.ExchangeDeclare(topology.DeadLetterExchange, "direct", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(q, true, false, false, false, amqp.Table{"x-queue-type": "quorum", "x-delivery-limit": int32(3),
		"x-dead-letter-exchange": topology.DeadLetterExchange, "x-dead-letter-routing-key": dlq}); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(dlq, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(dlq, dlq, topology.DeadLetterExchange, false, nil); err != nil {
		t.Fatal(err)
	}
	c, err := b.Consume(testenv.Context(t, 20*time.Second), q, mq.HandlerFunc(func(context.Context, *mq.Delivery) error {
		return middleware.Park(errors.New("a person must look"))
	}), middleware.Standard(retry.Policy{}, middleware.WithoutDeclare()), mq.WithRequeuePause(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer testenv.Stop(t, c)
	testenv.Publish(t, b, q, mq.Message{Body: []byte("x"), MessageId: "loop"})
	if auditCountsOnlyFailures(auditVersion(t)) {
		// 4.3 does not count a failed set-aside's return (basic.nack: the
		// library's failure, not the message's), so the broker does not end
		// the loop: the message is kept, each return visible, until
		// .parked can be written.
		testenv.Eventually(t, 15*time.Second, func() bool { return lg.Count(mq.EventRequeued) >= 4 }, "4 returns")
		if n := testenv.Count(t, b, dlq); n != 0 {
			t.Fatalf("%s holds %d messages: 4.3 counted a failed set-aside's return", dlq, n)
		}
		parked := topology.ParkedQueue(q)
		testenv.Cleanup(t, parked)
		if _, err := ch.QueueDeclare(parked, true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
		testenv.WaitCount(t, b, parked, 1, 15*time.Second)
		return
	}
	testenv.WaitCount(t, b, dlq, 1, 15*time.Second)
	recs := lg.All(mq.EventRequeued)
	if len(recs) < 3 {
		t.Fatalf("%d %s records, want one per return (3 before the limit)", len(recs), mq.EventRequeued)
	}
	if got := recs[len(recs)-1].Attrs["delivery_count"]; got == "" || got == "0" {
		t.Errorf("the last requeue record carries delivery_count=%v, want the broker's count", got)
	}
	d := testenv.GetAll(t, b, dlq)[0]
	if d.Headers["x-first-death-reason"] != "delivery_limit" {
		t.Errorf("the .dlq copy died of %v, want delivery_limit", d.Headers["x-first-death-reason"])
	}
}

// Coalesced acknowledgements under concurrency 8, random latencies and
// outcomes, and a connection cut in the middle: every message is handled
// or in .dlq (an ack that covered a delivery still in hand would lose it
// at the cut, its handler cut short), no channel dies of an unknown
// delivery tag (an ack sent twice), and the queue ends empty.
func TestCoalescedAcksNeverCoverADeliveryInHand(t *testing.T) {
	t.Parallel()
	proxy, url := testenv.Proxy(t)
	b, lg := consBroker(t, url)
	p := retry.Exponential(2, 20*time.Millisecond)
	q := testenv.Queue(t, b, p)
	const n = 3000
	var mu sync.Mutex
	handled := map[string]int{}
	tries := map[string]int{}
	h := mq.HandlerFunc(func(ctx context.Context, d *mq.Delivery) error {
		var i int
		fmt.Sscanf(d.MessageId, "ack-%d", &i)
		select {
		case <-time.After(time.Duration(i*7919%3000) * time.Microsecond):
		case <-ctx.Done():
			return ctx.Err()
		}
		mu.Lock()
		defer mu.Unlock()
		tries[d.MessageId]++
		switch {
		case i%10 == 3:
			return middleware.Reject(errors.New("permanent"))
		case i%10 == 7 && tries[d.MessageId] == 1:
			return errors.New("once")
		}
		handled[d.MessageId]++
		return nil
	})
	c, err := b.Consume(testenv.Context(t, 20*time.Second), q, h, middleware.Standard(p), mq.WithConcurrency(8), mq.WithPrefetch(64))
	if err != nil {
		t.Fatal(err)
	}
	defer testenv.Stop(t, c)
	testenv.Publish(t, b, q, consMessages("ack", n)...)
	testenv.Eventually(t, 20*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(handled) > n/2 }, "half handled")
	proxy.Cut()
	rejected := n / 10
	done := func() bool { mu.Lock(); defer mu.Unlock(); return len(handled) == n-rejected }
	if !testenv.Poll(30*time.Second, done) {
		mu.Lock()
		var missing []string
		for i := range n {
			id := fmt.Sprintf("ack-%d", i)
			if i%10 != 3 && handled[id] == 0 {
				missing = append(missing, fmt.Sprintf("%s(tries %d)", id, tries[id]))
			}
		}
		mu.Unlock()
		for _, d := range testenv.GetAll(t, b, topology.DeadLetterQueue(q)) {
			if !strings.HasSuffix(d.MessageId, "3") {
				t.Logf(".dlq holds %s: %v %v attempt %v", d.MessageId, d.Headers[mq.HeaderReason], d.Headers[mq.HeaderError], d.Headers[mq.HeaderAttempt])
			}
		}
		t.Fatalf("%d messages never handled: %v", len(missing), missing[:min(20, len(missing))])
	}
	testenv.Eventually(t, 10*time.Second, func() bool { return testenv.Count(t, b, topology.DeadLetterQueue(q)) >= rejected },
		"%d rejected messages in .dlq", rejected)
	testenv.Stop(t, c)
	if left := testenv.Count(t, b, q); left != 0 {
		t.Errorf("%d messages left in the queue", left)
	}
	dead := map[string]bool{}
	for _, d := range testenv.GetAll(t, b, topology.DeadLetterQueue(q)) {
		if !strings.HasSuffix(d.MessageId, "3") {
			t.Errorf("%s is in .dlq, but only ids ending in 3 are rejected", d.MessageId)
		}
		dead[d.MessageId] = true
	}
	if len(dead) != rejected {
		t.Errorf("%d distinct messages in .dlq, want %d", len(dead), rejected)
	}
	for _, s := range []string{"PRECONDITION_FAILED", "unknown delivery tag"} {
		for _, r := range lg.Containing(s) {
			t.Errorf("a record mentions %q: %v", s, r)
		}
	}
	var dups int
	for _, k := range handled {
		dups += k - 1
	}
	t.Logf("%d handled, %d duplicates after one cut", len(handled), dups)
}
