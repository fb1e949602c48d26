//go:build integration

package integration

// Issue 4: a consumer survives connection loss. 2000 messages consumed while
// the connection is cut 3 times: every message handled at least once, none
// lost, none acknowledged on the wrong channel.

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acemq/acemq-go/internal/testenv"
	"github.com/acemq/acemq-go/middleware"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/retry"
)

func TestConsumerSurvivesCuts(t *testing.T) {
	t.Parallel()
	const total = 2000
	cutAt := []int{400, 900, 1400} // distinct messages handled before each cut

	// Filled directly; only the consumer's broker goes through the proxy.
	direct, _ := consBroker(t)
	p := retry.Exponential(3, time.Second, retry.InProcessLimit(0)) // two rungs to redeclare on each resubscribe
	q := testenv.Queue(t, direct, p)
	testenv.Publish(t, direct, q, consMessages("cut", total)...)

	proxy, u := testenv.Proxy(t)
	b, lg := consBroker(t, u)

	var mu sync.Mutex
	seen := map[string]int{}
	handled := func() (distinct, calls int) {
		mu.Lock()
		defer mu.Unlock()
		for _, n := range seen {
			calls += n
		}
		return len(seen), calls
	}
	h := mq.HandlerFunc(func(_ context.Context, d *mq.Delivery) error {
		time.Sleep(time.Millisecond)
		mu.Lock()
		seen[d.MessageId]++
		mu.Unlock()
		return nil
	})
	c, err := b.Consume(testenv.Context(t, 20*time.Second), q, h, middleware.Standard(p),
		mq.WithConcurrency(4), mq.WithPrefetch(50))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for i, at := range cutAt {
		testenv.Eventually(t, 30*time.Second, func() bool { d, _ := handled(); return d >= at }, "%d messages handled before cut %d", at, i+1)
		if d, _ := handled(); d >= total {
			t.Fatalf("every message was handled before cut %d: the cuts did not happen mid-run", i+1)
		}
		n := proxy.Cut()
		t.Logf("cut %d at %d handled: %d connection(s)", i+1, at, n)
		testenv.Eventually(t, 10*time.Second, func() bool { return lg.Count("acemq.consumer.resubscribed") >= i+1 }, "resubscribed after cut %d", i+1)
	}
	testenv.Eventually(t, 60*time.Second, func() bool { d, _ := handled(); return d >= total }, "all %d messages handled", total)
	took := time.Since(start)
	testenv.Stop(t, c)                 // anything not acknowledged goes back to the queue now
	time.Sleep(300 * time.Millisecond) // and reaches its count a moment later

	distinct, calls := handled()
	t.Logf("%d messages handled in %v, %d calls (%d redelivered after the cuts)", distinct, took.Round(time.Millisecond), calls, calls-distinct)
	var missing []string
	for i := range total {
		if id := fmt.Sprintf("cut-%d", i); seen[id] == 0 {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		t.Errorf("%d messages never handled, e.g. %v", len(missing), missing[:min(5, len(missing))])
	}
	if n := testenv.Count(t, direct, q); n != 0 {
		t.Errorf("%s holds %d messages after the run: acknowledgements were lost", q, n)
	}
	if n := lg.Count(mq.EventConnectionLost); n < len(cutAt) {
		t.Errorf("%d %s records for %d cuts", n, mq.EventConnectionLost, len(cutAt))
	}
	interrupted := lg.All("acemq.consumer.interrupted")
	if len(interrupted) < len(cutAt) {
		t.Errorf("%d acemq.consumer.interrupted records for %d cuts", len(interrupted), len(cutAt))
	}
	// An ack sent on a channel the delivery did not come on is refused with
	// 406 PRECONDITION_FAILED "unknown delivery tag", which kills that
	// channel: the consumer would log it as the reason it was interrupted.
	// (The code is matched as amqp091 writes it, "Exception (406)": a bare
	// "406" also matched the proxy's port in a reset's reason, 127.0.0.1:40607.)
	for _, r := range interrupted {
		if strings.Contains(r.Attrs["reason"], "(406)") || strings.Contains(r.Attrs["reason"], "PRECONDITION_FAILED") {
			t.Errorf("a channel died of a bad acknowledgement: %v", r)
		}
	}
	for _, s := range []string{"PRECONDITION_FAILED", "unknown delivery tag"} {
		for _, r := range lg.Containing(s) {
			t.Errorf("a record mentions %q: %v", s, r)
		}
	}
	if n := lg.Count("acemq.message.rejected"); n != 0 {
		t.Errorf("%d messages rejected", n)
	}
	t.Logf("%d settlements skipped because their channel had died (the broker requeued those)", lg.Count("acemq.settle.skipped"))
	for _, r := range lg.All(mq.EventConsumerSubscribeFailed) {
		t.Logf("resubscribe failed: %v", r)
	}
}
