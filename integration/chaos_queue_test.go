//go:build chaos

package integration

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq-go/internal/testenv"
	"github.com/acemq/acemq-go/middleware"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/retry"
	"github.com/acemq/acemq-go/topology"
)

// Scenario 5: the queue is deleted under a running consumer, and created
// again. While it is gone the consumer logs acemq.consumer.subscribe.failed
// with a growing wait between attempts (it does not spin) and does not give
// up; publishes to it come back unroutable (they are not confirmed). Once it
// is declared again the consumer resubscribes within its backoff, and every
// message published after that is handled.
func TestChaosQueueDeletedAndRecreated(t *testing.T) {
	testenv.NoLeaks(t)
	const (
		batch   = 300
		gone    = 20
		observe = 3 * time.Second
	)
	ctx := testenv.Context(t, 2*time.Minute)
	lg := newChaosLog(t)
	b := chaosBroker(t, lg, testenv.Name(t, "deleted"), "") // backoff 20 ms … 500 ms
	p := retry.Exponential(3, 50*time.Millisecond)
	q := testenv.Queue(t, b, p)
	led := newChaosLedger("queue-deleted-recreated")
	c := chaosConsume(t, ctx, b, q, led.handler(nil), middleware.Standard(p), mq.WithConcurrency(4))
	chaosPublishAll(t, b, led, q, "before", batch)
	if !testenv.Poll(30*time.Second, led.allHandled) {
		t.Fatalf("the messages published before the deletion were not all handled")
	}
	if !testenv.Poll(10*time.Second, func() bool { return testenv.Count(t, b, q) == 0 }) {
		t.Fatalf("%s still holds messages before the deletion", q)
	}

	if _, err := b.DeleteQueue(ctx, q); err != nil {
		t.Fatal(err)
	}
	deletedAt := time.Now()
	if !testenv.Poll(10*time.Second, func() bool { return lg.Count(mq.EventConsumerSubscribeFailed) >= 1 }) {
		t.Fatalf("no %s within 10 s of the deletion; events: %s", mq.EventConsumerSubscribeFailed, lg.Events())
	}
	// While it is gone: publishes come back unroutable.
	pub := b.Publisher("")
	defer pub.Close()
	unroutable := 0
	for i := range gone {
		err := led.publish(testenv.Context(t, 10*time.Second), pub, q, fmt.Sprintf("gone-%03d", i))
		switch {
		case errors.Is(err, mq.ErrUnroutable):
			unroutable++
		case err == nil:
			t.Errorf("gone-%03d confirmed with %s deleted", i, q)
		default:
			t.Errorf("gone-%03d: %v; want ErrUnroutable", i, err)
		}
	}
	time.Sleep(time.Until(deletedAt.Add(observe)))
	failed := lg.All(mq.EventConsumerSubscribeFailed)
	attempts := len(failed)
	var waits []time.Duration
	for _, r := range failed {
		if d, err := time.ParseDuration(r.Attrs["retry_in"]); err == nil {
			waits = append(waits, d)
		}
	}
	t.Logf("%d resubscribe attempts in the %v after the deletion; waits %v", attempts, observe, waits)
	if attempts < 3 || attempts > 30 {
		t.Errorf("%d resubscribe attempts in %v: want a few, with backoff, not a spin", attempts, observe)
	}
	if len(waits) != attempts {
		t.Errorf("%d of %d %s records say how long until the next attempt (retry_in)", len(waits), attempts, mq.EventConsumerSubscribeFailed)
	} else if attempts >= 3 && waits[len(waits)-1] <= waits[0] {
		t.Errorf("the wait between attempts did not grow: %v", waits)
	}
	if rec := failed[0]; !strings.Contains(rec.Attrs["error"], q) || !strings.Contains(rec.Attrs["error"], "404") {
		t.Errorf("%v: should name the queue and the refusal (404)", rec)
	}
	select {
	case <-c.Done():
		t.Fatalf("the consumer gave up: %v", c.Err())
	default:
	}

	if err := b.Declare(ctx, topology.New().Queue(q)); err != nil {
		t.Fatal(err)
	}
	redeclaredAt := time.Now()
	if !testenv.Poll(10*time.Second, func() bool { return lg.Count("acemq.consumer.resubscribed") >= 1 }) {
		t.Fatalf("not resubscribed within 10 s of the queue's return")
	}
	resumedIn := time.Since(redeclaredAt)
	t.Logf("resubscribed %v after the queue was declared again", resumedIn.Round(time.Millisecond))
	if resumedIn > 2*time.Second {
		t.Errorf("resubscribed only %v after the queue was back: the backoff is at most 500 ms here", resumedIn.Round(time.Millisecond))
	}

	chaosPublishAll(t, b, led, q, "after", batch)
	if !testenv.Poll(30*time.Second, led.allHandled) {
		t.Errorf("not every message published after the queue's return was handled")
	}
	testenv.Stop(t, c)
	left := testenv.Count(t, b, q)
	if left != 0 {
		t.Errorf("%d messages left in %s", left, q)
	}
	if n := lg.Count("acemq.consumer.interrupted"); n != 1 {
		t.Errorf("%d acemq.consumer.interrupted records, want 1 (the deletion)", n)
	}
	led.report(t, lg, nil, fmt.Sprintf("unroutable_while_gone=%d resubscribe_attempts=%d resumed_in=%v left=%d",
		unroutable, attempts, resumedIn.Round(time.Millisecond), left))
}
