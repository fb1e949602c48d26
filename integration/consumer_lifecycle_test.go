//go:build integration

package integration

// Issue 4: Stop drains, a missing queue fails fast, a deleted queue is
// retried with backoff, and a stopped consumer leaves no goroutine behind.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.uber.org/goleak"

	"github.com/acemq/acemq-go/internal/testenv"
	"github.com/acemq/acemq-go/middleware"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/retry"
	"github.com/acemq/acemq-go/topology"
)

// consInFlight tracks which messages a handler started and finished.
type consInFlight struct {
	mu       sync.Mutex
	started  map[string]bool
	finished map[string]bool // returned nil
}

func newConsInFlight() *consInFlight {
	return &consInFlight{started: map[string]bool{}, finished: map[string]bool{}}
}

func (f *consInFlight) start(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.started[id] = true
}

func (f *consInFlight) finish(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.finished[id] = true
}

func (f *consInFlight) counts() (started, finished int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.started), len(f.finished)
}

// Stop during in-flight work (concurrency 4, handlers taking 300 ms, 50
// messages): every message is either acknowledged after its handler
// finished or back in its queue; counted, none lost.
func TestConsumerStopDrainsInFlight(t *testing.T) {
	t.Parallel()
	const total = 50
	p := retry.Fixed(3, 10*time.Millisecond)

	t.Run("handlers finish within the stop context", func(t *testing.T) {
		t.Parallel()
		b, _ := consBroker(t)
		q := testenv.Queue(t, b, p)
		testenv.Publish(t, b, q, consMessages("stop", total)...)
		fl := newConsInFlight()
		h := mq.HandlerFunc(func(_ context.Context, d *mq.Delivery) error {
			fl.start(d.MessageId)
			time.Sleep(300 * time.Millisecond) // work that does not watch its context
			fl.finish(d.MessageId)
			return nil
		})
		c, err := b.Consume(testenv.Context(t, 20*time.Second), q, h, middleware.Standard(p),
			mq.WithConcurrency(4), mq.WithPrefetch(10))
		if err != nil {
			t.Fatal(err)
		}
		// Stop in the middle of the second round of handlers.
		testenv.Eventually(t, 10*time.Second, func() bool { s, f := fl.counts(); return f >= 4 && s >= 8 }, "a second round in flight")
		time.Sleep(50 * time.Millisecond)
		startedAtStop, _ := fl.counts()
		if err := c.Stop(testenv.Context(t, 10*time.Second)); err != nil {
			t.Fatalf("Stop = %v", err)
		}
		started, finished := fl.counts()
		if started != finished {
			t.Errorf("%d handlers started, %d finished: Stop must let in-flight handlers finish", started, finished)
		}
		if started != startedAtStop {
			t.Errorf("%d handlers started after Stop began (%d before)", started-startedAtStop, startedAtStop)
		}
		testenv.WaitCount(t, b, q, total-finished, 5*time.Second)
		remaining := testenv.GetAll(t, b, q)
		t.Logf("handled %d, back in the queue %d", finished, len(remaining))
		seen := map[string]bool{}
		for id := range fl.finished {
			seen[id] = true
		}
		for _, d := range remaining {
			if seen[d.MessageId] {
				t.Errorf("%s was handled and acknowledged, yet is back in the queue", d.MessageId)
			}
			seen[d.MessageId] = true
		}
		if finished+len(remaining) != total || len(seen) != total {
			t.Errorf("handled %d + remaining %d = %d distinct of %d published: lost messages", finished, len(remaining), len(seen), total)
		}
	})

	t.Run("stop context ends first", func(t *testing.T) {
		t.Parallel()
		b, _ := consBroker(t)
		q := testenv.Queue(t, b, p)
		testenv.Publish(t, b, q, consMessages("abort", total)...)
		fl := newConsInFlight()
		h := mq.HandlerFunc(func(ctx context.Context, d *mq.Delivery) error {
			fl.start(d.MessageId)
			select {
			case <-time.After(5 * time.Second):
				fl.finish(d.MessageId)
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
		c, err := b.Consume(testenv.Context(t, 20*time.Second), q, h, middleware.Standard(p),
			mq.WithConcurrency(4), mq.WithPrefetch(10))
		if err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, 10*time.Second, func() bool { s, _ := fl.counts(); return s >= 4 }, "4 handlers in flight")
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		if err := c.Stop(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Stop = %v, want the stop context's deadline", err)
		}
		select {
		case <-c.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("Done did not close after the handlers returned")
		}
		_, finished := fl.counts()
		var remaining int
		testenv.Eventually(t, 5*time.Second, func() bool { remaining = testenv.Count(t, b, q); return finished+remaining == total },
			"handled %d + remaining %d = %d published", finished, remaining, total)
	})
}

// Consume on a missing queue fails fast, naming the queue.
func TestConsumerMissingQueueFailsFast(t *testing.T) {
	t.Parallel()
	b, _ := consBroker(t)
	p := retry.Exponential(3, time.Second, retry.InProcessLimit(0))
	q := testenv.Name(t, "missing")
	testenv.CleanupDerived(t, q, p) // DeclareOnStart declares the failure half first
	for _, opts := range [][]mq.ConsumerOption{nil, {middleware.Standard(p)}} {
		start := time.Now()
		c, err := b.Consume(testenv.Context(t, 10*time.Second), q, mq.HandlerFunc(func(context.Context, *mq.Delivery) error { return nil }), opts...)
		if err == nil {
			testenv.Stop(t, c)
			t.Fatal("Consume on a missing queue succeeded")
		}
		if !errors.Is(err, mq.ErrNotFound) || !strings.Contains(err.Error(), q) {
			t.Errorf("Consume = %v, want ErrNotFound naming %s", err, q)
		}
		if took := time.Since(start); took > 2*time.Second {
			t.Errorf("took %v to fail", took)
		}
	}
}

// A stream the Broker declared is refused by Consume, at once and saying
// why, instead of a consumer that waits at the stream's end for ever (it
// subscribed with no offset before, and received nothing).
func TestConsumerRefusesAStream(t *testing.T) {
	t.Parallel()
	b, _ := consBroker(t)
	q := testenv.Name(t, "stream")
	testenv.Cleanup(t, q)
	if err := b.Declare(testenv.Context(t, 15*time.Second), topology.New().Queue(q, topology.Args(map[string]any{"x-queue-type": "stream"}))); err != nil {
		t.Fatal(err)
	}
	c, err := b.Consume(testenv.Context(t, 10*time.Second), q, mq.HandlerFunc(func(context.Context, *mq.Delivery) error { return nil }))
	if err == nil {
		testenv.Stop(t, c)
		t.Fatal("Consume of a stream succeeded")
	}
	if !errors.Is(err, mq.ErrInvalid) || !strings.Contains(err.Error(), "stream") || !strings.Contains(err.Error(), q) {
		t.Errorf("Consume = %v, want ErrInvalid naming the queue and saying it is a stream", err)
	}
}

// A stream declared outside the Broker (here on a connection of the
// test's own; another service or rabbitmqctl alike) is unknown to Consume,
// which subscribes. Its first delivery carries x-stream-offset, and the
// consumer refuses the queue there: no middleware or handler runs, the
// consumer ends with ErrInvalid saying the queue is a stream, and the
// stream still holds the message. Before, the handler took it, and the
// runtime's requeues, rejects and retry copies went wrong on it.
func TestConsumerRefusesAStreamDeclaredElsewhere(t *testing.T) {
	t.Parallel()
	b, lg := consBroker(t)
	q := testenv.Name(t, "stream")
	testenv.Cleanup(t, q)
	conn, err := amqp.Dial(testenv.URL())
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(q, true, false, false, false, amqp.Table{"x-queue-type": "stream"}); err != nil {
		t.Fatal(err)
	}
	var calls, mwCalls atomic.Int32
	h := mq.HandlerFunc(func(context.Context, *mq.Delivery) error { calls.Add(1); return nil })
	mw := mq.Middleware(func(next mq.Handler) mq.Handler {
		return mq.HandlerFunc(func(ctx context.Context, d *mq.Delivery) error { mwCalls.Add(1); return next.Handle(ctx, d) })
	})
	c, err := b.Consume(testenv.Context(t, 10*time.Second), q, h, mq.WithMiddleware(mw), mq.WithPrefetch(10), mq.WithConcurrency(2))
	if err != nil {
		t.Fatalf("Consume of a stream declared elsewhere = %v: Consume cannot know it, and should subscribe", err)
	}
	defer testenv.Stop(t, c)
	// Published once the subscription is up: a consumer at the stream's
	// "next" offset is sent it.
	if err := ch.PublishWithContext(testenv.Context(t, 10*time.Second), "", q, false, false, amqp.Publishing{Body: []byte("in the stream"), MessageId: "m1"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.Done():
	case <-time.After(15 * time.Second):
		t.Fatalf("the consumer still runs 15s after a message was published to the stream (handler called %d times)", calls.Load())
	}
	if n, m := calls.Load(), mwCalls.Load(); n != 0 || m != 0 {
		t.Errorf("handler called %d times, middleware %d: a stream's delivery must reach neither", n, m)
	}
	if err := c.Err(); !errors.Is(err, mq.ErrInvalid) || !strings.Contains(err.Error(), "stream") || !strings.Contains(err.Error(), q) {
		t.Errorf("Err = %v, want ErrInvalid naming the queue and saying it is a stream", err)
	}
	if n := lg.Count("acemq.consumer.gave.up"); n != 1 {
		t.Errorf("%d acemq.consumer.gave.up records, want 1 (%s)", n, lg.Events())
	}
	// Nothing was given back with a nack: on 3.10 a nack of a stream's
	// delivery is a connection error (540), and the Broker's connection
	// would have gone with it.
	if ok, err := b.QueueExists(testenv.Context(t, 10*time.Second), q); !ok || err != nil {
		t.Errorf("QueueExists after the refusal = %v, %v", ok, err)
	}
	if n := lg.Count(mq.EventConnectionLost); n != 0 {
		t.Errorf("%d %s records: the refusal took the Broker's connection down", n, mq.EventConnectionLost)
	}
	// The stream still holds the message, for a reader with an offset.
	rd, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	if err := rd.Qos(10, 0, false); err != nil {
		t.Fatal(err)
	}
	ds, err := rd.Consume(q, "", false, false, false, false, amqp.Table{"x-stream-offset": "first"})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case d := <-ds:
		if string(d.Body) != "in the stream" || d.MessageId != "m1" {
			t.Errorf("the stream's first message is %q (%s), want the one published", d.Body, d.MessageId)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the stream's message is not there to read from offset first")
	}
}

// A message that carries x-stream-offset in a queue that is no stream (a
// shovel or a service that read it from a stream passes the header on) is
// handled like any other: the consumer asks the queue before it refuses,
// and a stream is the queue that reports no consumer while this one is
// subscribed.
func TestConsumerHandlesAStreamOffsetCopiedToAQueue(t *testing.T) {
	t.Parallel()
	b, _ := consBroker(t)
	for _, kind := range []struct {
		name string
		opts []topology.QueueOption
	}{{"quorum", nil}, {"classic", []topology.QueueOption{topology.Classic()}}} {
		t.Run(kind.name, func(t *testing.T) {
			q := testenv.Queue(t, b, retry.Policy{}, kind.opts...)
			testenv.Publish(t, b, q, mq.Message{MessageId: "copied", Headers: amqp.Table{"x-stream-offset": int64(7)}}, mq.Message{MessageId: "plain"})
			got := make(chan string, 10)
			h := mq.HandlerFunc(func(_ context.Context, d *mq.Delivery) error {
				if _, ok := d.Headers["x-stream-offset"]; !ok && d.MessageId == "copied" {
					t.Errorf("the copied header did not reach the handler: %v", d.Headers)
				}
				got <- d.MessageId
				return nil
			})
			c, err := b.Consume(testenv.Context(t, 10*time.Second), q, h)
			if err != nil {
				t.Fatal(err)
			}
			defer testenv.Stop(t, c)
			consExpect(t, got, "copied")
			consExpect(t, got, "plain")
			select {
			case <-c.Done():
				t.Fatalf("the consumer ended: %v", c.Err())
			default:
			}
			testenv.WaitCount(t, b, q, 0, 5*time.Second)
		})
	}
}

// A queue deleted under a running consumer: the consumer logs
// acemq.consumer.subscribe.failed with backoff (no spin), and consumes
// again once the queue is back.
func TestConsumerQueueDeletedAndRecreated(t *testing.T) {
	t.Parallel()
	b, lg := consBroker(t)
	p := retry.Fixed(2, 10*time.Millisecond)
	q := testenv.Queue(t, b, p)
	got := make(chan string, 10)
	h := mq.HandlerFunc(func(_ context.Context, d *mq.Delivery) error { got <- d.MessageId; return nil })
	c, err := b.Consume(testenv.Context(t, 30*time.Second), q, h, middleware.Standard(p))
	if err != nil {
		t.Fatal(err)
	}
	defer testenv.Stop(t, c)
	testenv.Publish(t, b, q, mq.Message{MessageId: "before"})
	consExpect(t, got, "before")

	if _, err := b.DeleteQueue(testenv.Context(t, 10*time.Second), q); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, func() bool { return lg.Count(mq.EventConsumerSubscribeFailed) >= 1 }, "%s logged", mq.EventConsumerSubscribeFailed)
	first := lg.Count(mq.EventConsumerSubscribeFailed)
	time.Sleep(2 * time.Second)
	attempts := lg.Count(mq.EventConsumerSubscribeFailed) - first
	t.Logf("%d resubscribe attempts in 2s", attempts)
	if attempts < 2 || attempts > 25 {
		t.Errorf("%d resubscribe attempts in 2s: want a few, with backoff", attempts)
	}
	rec := lg.All(mq.EventConsumerSubscribeFailed)[0]
	if !strings.Contains(rec.Attrs["error"], q) || !strings.Contains(rec.Attrs["error"], "404") || rec.Attrs["retry_in"] == "" {
		t.Errorf("record %v: should name the queue, the refusal and the wait", rec)
	}
	if n := lg.Count("acemq.consumer.interrupted"); n != 1 {
		t.Errorf("%d acemq.consumer.interrupted records, want 1", n)
	}
	select {
	case <-c.Done():
		t.Fatalf("the consumer ended: %v", c.Err())
	default:
	}

	if err := b.Declare(testenv.Context(t, 10*time.Second), topology.New().Queue(q)); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, func() bool { return lg.Count("acemq.consumer.resubscribed") >= 1 }, "resubscribed")
	testenv.Publish(t, b, q, mq.Message{MessageId: "after"})
	consExpect(t, got, "after")
}

func consExpect(t *testing.T, got <-chan string, id string) {
	t.Helper()
	select {
	case g := <-got:
		if g != id {
			t.Fatalf("handled %s, want %s", g, id)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("%s was not handled", id)
	}
}

// consExercise runs a consumer with the standard stack through an
// in-process retry, a broker rung hop, a park and a dead letter, then
// stops it.
func consExercise(t *testing.T, b *mq.Broker, q string, p retry.Policy, between func()) {
	t.Helper()
	var n atomic.Int32
	h := mq.HandlerFunc(func(_ context.Context, d *mq.Delivery) error {
		n.Add(1)
		switch {
		case d.MessageId == "park":
			return middleware.Park(errors.New("look"))
		case d.MessageId == "dead":
			return middleware.Reject(errors.New("bad"))
		case d.MessageId == "panic" && d.Attempt() == 1:
			panic("once")
		case d.Attempt() < 3 && d.MessageId == "retry":
			return fmt.Errorf("attempt %d", d.Attempt())
		}
		return nil
	})
	c, err := b.Consume(testenv.Context(t, 30*time.Second), q, h, middleware.Standard(p), mq.WithConcurrency(2))
	if err != nil {
		t.Fatal(err)
	}
	testenv.Publish(t, b, q, mq.Message{MessageId: "retry"}, mq.Message{MessageId: "park"}, mq.Message{MessageId: "dead"}, mq.Message{MessageId: "panic"})
	testenv.Eventually(t, 15*time.Second, func() bool {
		return testenv.Count(t, b, topology.ParkedQueue(q)) == 1 && testenv.Count(t, b, topology.DeadLetterQueue(q)) == 1 && n.Load() >= 7
	}, "every message handled")
	if between != nil {
		between()
	}
	testenv.Stop(t, c)
}

// No goroutine outlives a stopped consumer: with the broker still open, and
// after a reconnect with the broker and the proxy closed.
func TestConsumerLeavesNoGoroutines(t *testing.T) {
	// Not parallel: goleak counts every goroutine of the process.
	p := retry.Waits(10*time.Millisecond, time.Second).With(retry.InProcessLimit(100 * time.Millisecond))

	t.Run("broker open", func(t *testing.T) {
		b, _ := consBroker(t)
		q := testenv.Queue(t, b, p)
		ignore := goleak.IgnoreCurrent()
		consExercise(t, b, q, p, nil)
		goleak.VerifyNone(t, ignore)
	})

	t.Run("reconnect, then close everything", func(t *testing.T) {
		helper, _ := consBroker(t)
		q := testenv.Queue(t, helper, p)
		ignore := goleak.IgnoreCurrent()
		proxy, u := testenv.Proxy(t)
		lg := testenv.NewLogRecorder(t)
		b := mq.New(mq.Config{URLs: []string{u}, Logger: lg.Logger(), ReconnectMin: 20 * time.Millisecond, ReconnectMax: 200 * time.Millisecond})
		if err := b.Start(testenv.Context(t, 10*time.Second)); err != nil {
			t.Fatal(err)
		}
		consExercise(t, b, q, p, func() {
			proxy.Cut()
			testenv.Eventually(t, 10*time.Second, func() bool { return lg.Count("acemq.consumer.resubscribed") >= 1 }, "resubscribed")
		})
		if err := b.Close(testenv.Context(t, 10*time.Second)); err != nil {
			t.Fatal(err)
		}
		proxy.Close()
		goleak.VerifyNone(t, ignore)
	})
}

// Stop while the connection is down and the consumer waits to resubscribe:
// Stop returns at once, the consumer ends cleanly, and the wait Stop cut
// short is not reported as a failed resubscribe.
func TestConsumerStopWhileDisconnected(t *testing.T) {
	t.Parallel()
	direct, _ := consBroker(t)
	p := retry.Fixed(2, 10*time.Millisecond)
	q := testenv.Queue(t, direct, p)
	proxy, u := testenv.Proxy(t)
	b, lg := consBroker(t, u)
	c, err := b.Consume(testenv.Context(t, 10*time.Second), q, mq.HandlerFunc(func(context.Context, *mq.Delivery) error { return nil }), middleware.Standard(p))
	if err != nil {
		t.Fatal(err)
	}
	proxy.Refuse(true)
	proxy.Cut()
	testenv.Eventually(t, 10*time.Second, func() bool { return lg.Count("acemq.consumer.interrupted") == 1 }, "interrupted")
	time.Sleep(200 * time.Millisecond) // the consumer waits for a connection to resubscribe on
	start := time.Now()
	if err := c.Stop(testenv.Context(t, 5*time.Second)); err != nil {
		t.Fatalf("Stop = %v", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("Stop took %v", took)
	}
	if err := c.Err(); err != nil {
		t.Errorf("Err = %v after Stop", err)
	}
	if recs := lg.All(mq.EventConsumerSubscribeFailed); len(recs) != 0 {
		t.Errorf("Stop was reported as a failed resubscribe: %v", recs)
	}
	proxy.Refuse(false)
}

// An in-process retry wait is cut short by Stop, and by a lost connection:
// either way the message goes back to its queue, not lost.
func TestConsumerInProcessWaitCutShort(t *testing.T) {
	t.Parallel()
	p := retry.Fixed(2, 20*time.Second) // waited in-process (limit 30 s)

	t.Run("by Stop", func(t *testing.T) {
		t.Parallel()
		b, _ := consBroker(t)
		q := testenv.Queue(t, b, p)
		calls := &consCalls{}
		h := mq.HandlerFunc(func(_ context.Context, d *mq.Delivery) error { calls.add(d); return errors.New("later") })
		c, err := b.Consume(testenv.Context(t, 10*time.Second), q, h, middleware.Standard(p))
		if err != nil {
			t.Fatal(err)
		}
		testenv.Publish(t, b, q, mq.Message{MessageId: "wait-stop"})
		testenv.Eventually(t, 10*time.Second, func() bool { return calls.n() == 1 }, "the first attempt")
		time.Sleep(100 * time.Millisecond) // into the 20 s wait
		start := time.Now()
		testenv.Stop(t, c)
		if took := time.Since(start); took > 2*time.Second {
			t.Errorf("Stop took %v: the wait was not cut short", took)
		}
		testenv.WaitCount(t, b, q, 1, 5*time.Second)
		if calls.n() != 1 {
			t.Errorf("%d calls, want 1", calls.n())
		}
	})

	t.Run("by a lost connection", func(t *testing.T) {
		t.Parallel()
		direct, _ := consBroker(t)
		q := testenv.Queue(t, direct, p)
		proxy, u := testenv.Proxy(t)
		b, _ := consBroker(t, u)
		calls := &consCalls{}
		redelivered := make(chan bool, 4)
		h := mq.HandlerFunc(func(_ context.Context, d *mq.Delivery) error {
			if calls.add(d) == 1 {
				return errors.New("later")
			}
			redelivered <- d.Redelivered
			return nil
		})
		c, err := b.Consume(testenv.Context(t, 10*time.Second), q, h, middleware.Standard(p))
		if err != nil {
			t.Fatal(err)
		}
		defer testenv.Stop(t, c)
		testenv.Publish(t, direct, q, mq.Message{MessageId: "wait-cut"})
		testenv.Eventually(t, 10*time.Second, func() bool { return calls.n() == 1 }, "the first attempt")
		time.Sleep(100 * time.Millisecond)
		proxy.Cut()
		select {
		case r := <-redelivered:
			if !r {
				t.Error("the second delivery is not marked redelivered")
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the message did not come back after the cut")
		}
		_, attempts := calls.snapshot()
		t.Logf("attempts seen: %v (a broker redelivery carries the attempt header the message had)", attempts)
	})
}
