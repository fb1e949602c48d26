//go:build chaos

package integration

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/acemq/acemq-go/internal/testenv"
	"github.com/acemq/acemq-go/middleware"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/retry"
)

// Scenario 1: the connection is cut at random moments, mid-publish and
// mid-consume, again and again. One broker (as a service has: publishers,
// a consumer with the Standard stack, its hop publisher) goes through a TCP
// proxy of the test's own; 6 goroutines publish 5000 messages spread over
// ~9 s while the proxy cuts every connection 5 times in those 9 s. Every
// confirmed message is handled at least once, nothing is left in the queue,
// no acknowledgement lands on the wrong channel.
func TestChaosConnectionCuts(t *testing.T) {
	testenv.NoLeaks(t)
	const (
		total      = 5000
		publishers = 6
		cuts       = 5
		spread     = 9 * time.Second // publishing is spread over this, and the cuts too
	)
	ctx := testenv.Context(t, 2*time.Minute)
	direct := chaosBroker(t, nil, testenv.Name(t, "direct"), "")
	p := retry.Exponential(3, 50*time.Millisecond)
	q := testenv.Queue(t, direct, p)

	proxy, u := testenv.Proxy(t)
	lg := newChaosLog(t)
	b := chaosBroker(t, lg, testenv.Name(t, "proxied"), u)
	led := newChaosLedger("connection-cuts")

	c := chaosConsume(t, ctx, b, q, led.handler(chaosBusy), middleware.Standard(p), mq.WithConcurrency(4), mq.WithPrefetch(32))
	pub := b.Publisher("")
	defer pub.Close()

	start, wg := led.paced(ctx, pub, q, "cut", total, publishers, spread)

	// Five random moments while the publishers run, at least 400 ms apart,
	// so the client has reconnected (or is reconnecting) in between.
	var at []time.Duration
	for len(at) < cuts {
		d := 300*time.Millisecond + time.Duration(rand.N(int64(spread-500*time.Millisecond)))
		if !slices.ContainsFunc(at, func(x time.Duration) bool { return (x - d).Abs() < 400*time.Millisecond }) {
			at = append(at, d)
		}
	}
	slices.Sort(at)
	effective := 0
	for i, d := range at {
		time.Sleep(time.Until(start.Add(d)))
		cs := led.counts()
		n := proxy.Cut()
		if n > 0 {
			effective++
		}
		t.Logf("cut %d at %v: %d connection(s); %d published, %d confirmed, %d handled so far",
			i+1, d.Round(time.Millisecond), n, cs.published, cs.confirmed, cs.distinct)
	}
	wg.Wait()
	published := time.Since(start)
	if !testenv.Poll(15*time.Second, func() bool { return lg.Count("acemq.consumer.resubscribed") >= effective }) {
		t.Errorf("the consumer resubscribed %d times after %d cuts", lg.Count("acemq.consumer.resubscribed"), effective)
	}

	led.settle(t, direct, q)
	took := time.Since(start)
	testenv.Stop(t, c)
	left := testenv.Count(t, direct, q)
	if left != 0 {
		t.Errorf("%d messages left in %s after the consumer stopped: acknowledgements were lost", left, q)
	}
	if n := led.failureCount(); n > 0 {
		t.Errorf("%d publishes failed: a publish in flight at a cut must be sent again until its context ends", n)
	}
	if lost := lg.Count(mq.EventConnectionLost); lost < effective {
		t.Errorf("%d %s records for %d cuts that hit a connection", lost, mq.EventConnectionLost, effective)
	}
	dlq := testenv.Count(t, direct, q+".dlq")
	if dlq != 0 {
		t.Errorf("%d messages in the dead-letter queue: nothing here fails", dlq)
	}
	led.report(t, lg, nil, fmt.Sprintf("cuts=%d connections_accepted=%d left=%d published_in=%v took=%v",
		effective, proxy.Accepted(), left, published.Round(time.Millisecond), took.Round(time.Millisecond)))
}
