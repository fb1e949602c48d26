//go:build integration

package integration

// What RabbitMQ itself does with the library's returns, read from the
// broker's own counters on the messages (x-delivery-count, x-acquired-count,
// x-first-death-reason), on whatever version the suite runs on
// (docs/brokers.md). The frames the client sends are tested in
// returns_test.go; here it is what the broker made of them.

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/internal/testenv"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/ops"
	"github.com/acemq/acemq-go/retry"
	"github.com/acemq/acemq-go/topology"
)

// quorumDefaultLimit is the delivery limit RabbitMQ 4.x gives every quorum
// queue declared without x-delivery-limit; 3.10 gives none.
const quorumDefaultLimit = 20

// headerInt reads a long or int header the broker wrote, -1 when absent.
func headerInt(h amqp.Table, k string) int {
	switch v := h[k].(type) {
	case int64:
		return int(v)
	case int32:
		return int(v)
	case int:
		return v
	}
	return -1
}

// Every requeue loop the library can start ends, on 4.x, at the default
// delivery limit in the queue's dead-letter route (.dlq, died of
// delivery_limit), each return reported on the way (acemq.message.requeued):
// a handler that always asks for a requeue, and a panic outside every
// middleware. On 3.10 quorum queues have no default limit: the loop runs
// on, counted by the broker, until the handler stops it. A set-aside that
// keeps failing is the one loop the library keeps away from the limit (it
// goes back with basic.nack, uncounted on 4.3, after a pause that doubles
// with each counted return): TestAuditFailingSetAsideIsNotDroppedByTheDeliveryLimit.
func TestBrokerDeliveryLimitEndsEveryRequeueLoop(t *testing.T) {
	t.Parallel()
	v := testenv.BrokerVersion(t)
	loops := map[string]struct {
		handle func() error
	}{
		"requeue": {handle: func() error { return mq.Requeue(errors.New("not now")) }},
		"panic":   {handle: func() error { panic("outside every middleware") }},
	}
	for name, loop := range loops {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b, lg := consBroker(t)
			q := testenv.Queue(t, b, retry.Policy{}, topology.DeadLetter()) // quorum, no x-delivery-limit
			dlq := topology.DeadLetterQueue(q)
			// On 3.10 the handler ends the loop itself after this many calls.
			const unbounded = quorumDefaultLimit + 5
			var mu sync.Mutex
			var seen []amqp.Table
			h := mq.HandlerFunc(func(_ context.Context, d *mq.Delivery) error {
				mu.Lock()
				seen = append(seen, d.Headers)
				n := len(seen)
				mu.Unlock()
				if !v.AtLeast(4, 0) && n >= unbounded {
					return nil
				}
				return loop.handle()
			})
			c, err := b.Consume(testenv.Context(t, 20*time.Second), q, h, mq.WithRequeuePause(5*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			defer testenv.Stop(t, c)
			testenv.Publish(t, b, q, mq.Message{Body: []byte("x"), MessageId: "loop"})
			calls := func() int { mu.Lock(); defer mu.Unlock(); return len(seen) }

			if !v.AtLeast(4, 0) {
				testenv.Eventually(t, 60*time.Second, func() bool { return calls() >= unbounded }, "the loop ran %d times", unbounded)
				testenv.WaitCount(t, b, q, 0, 10*time.Second)
				mu.Lock()
				last := headerInt(seen[unbounded-1], "x-delivery-count")
				mu.Unlock()
				if last != unbounded-1 {
					t.Errorf("RabbitMQ %v: delivery %d carried x-delivery-count %d, want %d (every return counted, no limit)", v, unbounded, last, unbounded-1)
				}
				if n := testenv.Count(t, b, dlq); n != 0 {
					t.Errorf("RabbitMQ %v has no default delivery limit, yet %d in .dlq", v, n)
				}
				return
			}

			testenv.WaitCount(t, b, dlq, 1, 60*time.Second)
			got := testenv.GetAll(t, b, dlq)
			if len(got) != 1 {
				t.Fatalf("%d in .dlq, want the one message", len(got))
			}
			if r := got[0].Headers["x-first-death-reason"]; r != "delivery_limit" {
				t.Errorf(".dlq's copy died of %v, want delivery_limit", r)
			}
			if n := testenv.Count(t, b, q); n != 0 {
				t.Errorf("%d left in the queue", n)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(seen) != quorumDefaultLimit+1 {
				t.Errorf("handled %d times, want %d: the first delivery and one per counted return up to the limit", len(seen), quorumDefaultLimit+1)
			}
			for i, hd := range seen {
				want := i
				if i == 0 {
					want = -1 // a first delivery carries no count
				}
				if got := headerInt(hd, "x-delivery-count"); got != want {
					t.Errorf("delivery %d carried x-delivery-count %d, want %d", i+1, got, want)
				}
				if v.AtLeast(4, 3) {
					if got := headerInt(hd, "x-acquired-count"); got != want {
						t.Errorf("delivery %d carried x-acquired-count %d, want %d", i+1, got, want)
					}
				}
			}
			if recs := lg.All(mq.EventRequeued); len(recs) != len(seen) {
				t.Errorf("%d %s records for %d returns: a return went unreported", len(recs), mq.EventRequeued, len(seen))
			}
		})
	}
}

// What each of the library's ways of giving a message back costs it
// against a quorum queue's delivery limit, as the broker counts it: the
// message is read back afterwards with basic.get and its x-delivery-count
// (what the limit is checked against) and x-acquired-count (every return,
// from 4.3 on) compared with what the version counts. RabbitMQ 4.3 counts
// basic.reject and not basic.nack; 4.0 and 3.10 count every return.
func TestBrokerCountsEachReturn(t *testing.T) {
	t.Parallel()
	v := testenv.BrokerVersion(t)
	// counted is the x-delivery-count a message returned once by a
	// basic.reject (failed) or a basic.nack (nobody's failure) carries.
	counted := func(failed bool) int {
		if failed || !v.AtLeast(4, 3) {
			return 1
		}
		return -1 // never counted: no header
	}
	acquired := func() int {
		if v.AtLeast(4, 3) {
			return 1
		}
		return -1 // 4.0 and 3.10 do not write it
	}
	returns := map[string]struct {
		failed bool
		// give returns the message once; it hands back the headers of
		// the redelivery when it read them itself, nil to read them back
		// from the queue.
		give func(t *testing.T, b *mq.Broker, q string) amqp.Table
	}{
		"mq.Requeue": {failed: true, give: func(t *testing.T, b *mq.Broker, q string) amqp.Table {
			// The redelivery is read in the handler and acknowledged there:
			// a Stop holding it would give it back once more.
			again := make(chan amqp.Table, 1)
			calls := 0
			c, err := b.Consume(testenv.Context(t, 20*time.Second), q, mq.HandlerFunc(func(_ context.Context, d *mq.Delivery) error {
				calls++
				if calls == 1 {
					return mq.Requeue(errors.New("not now"))
				}
				again <- d.Headers
				return nil
			}), mq.WithPrefetch(1), mq.WithConcurrency(1), mq.WithRequeuePause(5*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			defer testenv.Stop(t, c)
			select {
			case h := <-again:
				return h
			case <-time.After(10 * time.Second):
				t.Fatal("the requeued message did not come back")
				return nil
			}
		}},
		"peek": {give: func(t *testing.T, b *mq.Broker, q string) amqp.Table {
			ctx := testenv.Context(t, 10*time.Second)
			// The peek's channel must be done before the message is read back.
			if got, err := ops.Peek(ctx, b, q, 1); err != nil || len(got) != 1 {
				t.Fatalf("peek: %d, %v", len(got), err)
			}
			return nil
		}},
		"stop's unstarted window": {give: func(t *testing.T, b *mq.Broker, q string) amqp.Table {
			started := make(chan struct{}, 2)
			release := make(chan struct{})
			c, err := b.Consume(testenv.Context(t, 20*time.Second), q, mq.HandlerFunc(func(_ context.Context, d *mq.Delivery) error {
				started <- struct{}{}
				<-release
				return nil
			}), mq.WithPrefetch(2), mq.WithConcurrency(1))
			if err != nil {
				t.Fatal(err)
			}
			<-started // the blocker is in hand, the message after it received and never started
			testenv.Eventually(t, 10*time.Second, func() bool { m, _ := testenv.Ready(testenv.Context(t, 5*time.Second), b, q); return m == 0 },
				"the consumer did not receive both")
			stopped := make(chan error, 1)
			go func() { stopped <- c.Stop(testenv.Context(t, 20*time.Second)) }()
			time.Sleep(100 * time.Millisecond)
			close(release)
			if err := <-stopped; err != nil {
				t.Fatal(err)
			}
			return nil
		}},
	}
	for name, r := range returns {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b, _ := consBroker(t)
			q := testenv.Queue(t, b, retry.Policy{}, topology.Quorum())
			msgs := []mq.Message{{Body: []byte("x"), MessageId: "returned"}}
			if name == "stop's unstarted window" {
				msgs = []mq.Message{{Body: []byte("x"), MessageId: "blocker"}, {Body: []byte("x"), MessageId: "returned"}}
			}
			testenv.Publish(t, b, q, msgs...)
			h := r.give(t, b, q)
			if h == nil {
				testenv.WaitCount(t, b, q, 1, 10*time.Second)
				got := testenv.GetAll(t, b, q)
				if len(got) != 1 || got[0].MessageId != "returned" {
					t.Fatalf("read back %d messages (%v), want the returned one", len(got), got)
				}
				h = got[0].Headers
			}
			if n, want := headerInt(h, "x-delivery-count"), counted(r.failed); n != want {
				t.Errorf("RabbitMQ %v: after one %s the message carries x-delivery-count %d, want %d", v, name, n, want)
			}
			if n, want := headerInt(h, "x-acquired-count"), acquired(); n != want {
				t.Errorf("RabbitMQ %v: after one %s the message carries x-acquired-count %d, want %d", v, name, n, want)
			}
			t.Logf("RabbitMQ %v, after one %s: x-delivery-count %d, x-acquired-count %d", v, name,
				headerInt(h, "x-delivery-count"), headerInt(h, "x-acquired-count"))
		})
	}
}

// A quorum queue declared with no dead-letter route says so when it is
// declared (acemq.queue.dead.letter.missing, with the limit that applies),
// and one with DeadLetter() does not. On 4.x the broker then drops a
// message returned past the default limit: after the first delivery and 20
// counted returns it is nowhere. On 3.10 there is no default limit to
// drop it at (TestBrokerDeliveryLimitEndsEveryRequeueLoop).
func TestBrokerQuorumQueueWithoutDeadLetterRoute(t *testing.T) {
	t.Parallel()
	v := testenv.BrokerVersion(t)
	b, lg := consBroker(t)
	bare := testenv.Queue(t, b, retry.Policy{})                          // quorum, no x-dead-letter-*
	routed := testenv.Queue(t, b, retry.Policy{}, topology.DeadLetter()) // quorum, dead-lettered to .dlq
	var named []string
	for _, r := range lg.All(mq.EventDeadLetterMissing) {
		named = append(named, r.Attrs["queue"])
	}
	if len(named) != 1 || named[0] != bare {
		t.Fatalf("%s named %v, want only %s (not %s, which has DeadLetter())", mq.EventDeadLetterMissing, named, bare, routed)
	}
	if !v.AtLeast(4, 0) {
		return
	}
	var mu sync.Mutex
	calls := 0
	c, err := b.Consume(testenv.Context(t, 20*time.Second), bare, mq.HandlerFunc(func(context.Context, *mq.Delivery) error {
		mu.Lock()
		calls++
		mu.Unlock()
		return mq.Requeue(errors.New("not now"))
	}), mq.WithRequeuePause(5*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer testenv.Stop(t, c)
	testenv.Publish(t, b, bare, mq.Message{Body: []byte("x"), MessageId: "dropped"})
	testenv.Eventually(t, 60*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return calls >= quorumDefaultLimit+1 },
		"the message handled %d times", quorumDefaultLimit+1)
	// Give the broker time to hand it out once more if it still had it.
	time.Sleep(500 * time.Millisecond)
	testenv.WaitCount(t, b, bare, 0, 10*time.Second)
	mu.Lock()
	defer mu.Unlock()
	if calls != quorumDefaultLimit+1 {
		t.Errorf("RabbitMQ %v: handled %d times, want %d and then dropped at the limit", v, calls, quorumDefaultLimit+1)
	}
}
