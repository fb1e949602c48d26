package testenv

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/ops"
	"github.com/acemq/acemq-go/retry"
	"github.com/acemq/acemq-go/topology"
)

// Queue declares a goit.* queue on b (a quorum queue unless opts say
// otherwise) and deletes it when the test ends, with every queue a
// consumer with policy p derives from it (see CleanupDerived).
func Queue(t testing.TB, b *mq.Broker, p retry.Policy, opts ...topology.QueueOption) string {
	t.Helper()
	q := Name(t)
	CleanupDerived(t, q, p)
	if err := b.Declare(Context(t, 15*time.Second), topology.New().Queue(q, opts...)); err != nil {
		t.Fatalf("declare %s: %v", q, err)
	}
	return q
}

// CleanupDerived deletes q when the test ends, with the queues a consumer
// with policy p derives from it: <q>.dlq, <q>.parked and p's broker rungs.
func CleanupDerived(t testing.TB, q string, p retry.Policy) {
	qs := []string{q, topology.DeadLetterQueue(q), topology.ParkedQueue(q)}
	for _, r := range p.BrokerRungs() {
		qs = append(qs, topology.Rung(q, p, r).Name)
	}
	Cleanup(t, qs...)
}

// CleanupExchanges deletes the named exchanges when the test ends, on a
// broker of its own.
func CleanupExchanges(t testing.TB, names ...string) {
	atEnd(t, func(ctx context.Context, b *mq.Broker) {
		ch, err := b.Channel(ctx)
		if err != nil {
			t.Errorf("cleanup: %v", err)
			return
		}
		defer ch.Close()
		for _, name := range names {
			if err := ch.ExchangeDelete(name, false, false); err != nil {
				t.Errorf("cleanup: delete exchange %s: %v", name, err)
			}
		}
	})
}

// NothingLeft fails the test if any of queues still exists once the test
// and the cleanups registered after this call have run (t.Cleanup runs the
// last registered first): call it before testenv.Cleanup and the like, to
// check that they delete everything the test made.
func NothingLeft(t testing.TB, queues ...string) {
	atEnd(t, func(ctx context.Context, b *mq.Broker) {
		for _, q := range queues {
			if ok, err := b.QueueExists(ctx, q); ok || err != nil {
				t.Errorf("queue %s left behind (exists %v, %v)", q, ok, err)
			}
		}
	})
}

// Publish publishes msgs to queue q through the default exchange, as one
// confirmed batch on a publisher of its own, or fails the test.
func Publish(t testing.TB, b *mq.Broker, q string, msgs ...mq.Message) {
	t.Helper()
	p := b.Publisher("")
	defer p.Close()
	if err := p.PublishBatch(Context(t, 60*time.Second), q, msgs); err != nil {
		t.Fatalf("publish to %s: %v", q, err)
	}
}

// Ready is the number of messages ready in q (ops.Count's Ready), and an
// error wrapping mq.ErrNotFound when q does not exist.
func Ready(ctx context.Context, b *mq.Broker, q string) (int, error) {
	cs, err := ops.Count(ctx, b, q)
	if err != nil {
		return 0, err
	}
	if !cs[0].Exists {
		return 0, fmt.Errorf("count %q: %w", q, mq.ErrNotFound)
	}
	return cs[0].Ready, nil
}

// Count is the number of ready messages in q, or a failed test.
func Count(t testing.TB, b *mq.Broker, q string) int {
	t.Helper()
	n, err := Ready(Context(t, 15*time.Second), b, q)
	if err != nil {
		t.Fatalf("count %s: %v", q, err)
	}
	return n
}

// WaitCount waits until q holds want ready messages, or fails the test
// after d. A requeue (a nack, a channel's close) reaches a queue's count a
// moment after the client sent it.
func WaitCount(t testing.TB, b *mq.Broker, q string, want int, d time.Duration) {
	t.Helper()
	var n int
	if !Poll(d, func() bool { n = Count(t, b, q); return n == want }) {
		t.Fatalf("not within %v: %s holds %d messages, want %d", d, q, n, want)
	}
}

// GetAll takes every message ready in q (basic.get, acknowledged), in queue
// order, on a channel of its own. Nothing else should consume q meanwhile.
func GetAll(t testing.TB, b *mq.Broker, q string) []amqp.Delivery {
	t.Helper()
	ch, err := b.Channel(Context(t, 60*time.Second))
	if err != nil {
		t.Fatalf("channel: %v", err)
	}
	defer ch.Close()
	var out []amqp.Delivery
	for {
		d, ok, err := ch.Get(q, true)
		if err != nil {
			t.Fatalf("get from %s: %v", q, err)
		}
		if !ok {
			return out
		}
		out = append(out, d)
	}
}

// Stop stops consumer c within 20 s, or marks the test failed.
func Stop(t testing.TB, c *mq.Consumer) {
	t.Helper()
	if err := c.Stop(Context(t, 20*time.Second)); err != nil {
		t.Errorf("stop consumer: %v", err)
	}
}

// DeleteBehind deletes q on a channel of b's own, as an operator or
// another service would: b does not see it, so a queue b declared is
// still one b declares again. It fails the test if the delete fails.
func DeleteBehind(t testing.TB, b *mq.Broker, q string) {
	t.Helper()
	ctx := Context(t, 15*time.Second)
	ch, err := b.Channel(ctx)
	if err != nil {
		t.Fatalf("delete %s: %v", q, err)
	}
	defer ch.Close()
	if _, err := ch.QueueDelete(q, false, false, false); err != nil {
		t.Fatalf("delete %s: %v", q, err)
	}
}

// Blocked reports whether b's readiness (Broker.Check) names a
// connection.blocked: the broker blocks publishing (a memory or disk alarm).
func Blocked(b *mq.Broker) bool {
	err := b.Check(context.Background())
	return err != nil && strings.Contains(err.Error(), "the broker blocks publishing")
}
