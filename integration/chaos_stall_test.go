//go:build chaos

package integration

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/acemq/acemq-go/internal/testenv"
	"github.com/acemq/acemq-go/middleware"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/retry"
)

// Scenario (issue 11): the network under the connection stops draining
// for 6 s — the proxy stops reading what the client sends and keeps its
// socket open, so writes block once the buffers are full — while 4
// goroutines publish 800 messages over 8 s (every 20th carries 4 MiB, so
// the buffers do fill) and a Standard consumer consumes. The write that
// moves no byte for two heartbeats (2 s here) closes the socket; the supervisor
// redials once the network drains again; every publish returns by its
// context (60 s: none may fail) and every confirmed message is handled.
func TestChaosStalledSocket(t *testing.T) {
	testenv.NoLeaks(t)
	const (
		total      = 800
		publishers = 4
		spread     = 8 * time.Second
		stallFrom  = 1500 * time.Millisecond
		stallFor   = 6 * time.Second
	)
	ctx := testenv.Context(t, 2*time.Minute)
	direct := chaosBroker(t, nil, testenv.Name(t, "direct"), "")
	p := retry.Exponential(3, 50*time.Millisecond)
	q := testenv.Queue(t, direct, p)

	proxy, u := testenv.Proxy(t)
	defer proxy.Cut()
	lg := newChaosLog(t)
	// Heartbeat 1 s: a write that moves no byte for 2 s ends the connection.
	b := testenv.Broker(t, mq.Config{URLs: []string{u}, ConnectionName: testenv.Name(t, "stalled"), Logger: lg.Logger(),
		Heartbeat: time.Second, ReconnectMin: 20 * time.Millisecond, ReconnectMax: 500 * time.Millisecond})
	led := newChaosLedger("stalled-socket")
	c := chaosConsume(t, ctx, b, q, led.handler(chaosBusy), middleware.Standard(p), mq.WithConcurrency(4))
	pub := b.Publisher("")
	defer pub.Close()

	start := time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var longest time.Duration
	for w := range publishers {
		wg.Go(func() {
			for i := w; i < total; i += publishers {
				if d := time.Until(start.Add(spread * time.Duration(i) / time.Duration(total))); d > 0 {
					time.Sleep(d)
				}
				size := 256
				if i%20 == 0 {
					size = 4 << 20
				}
				pctx, cancel := context.WithTimeout(ctx, 60*time.Second)
				t0 := time.Now()
				_ = led.publishMessage(pctx, pub, q, mq.Message{MessageId: fmt.Sprintf("stall-%05d", i), Body: make([]byte, size)})
				took := time.Since(t0)
				cancel()
				mu.Lock()
				longest = max(longest, took)
				mu.Unlock()
			}
		})
	}
	time.Sleep(time.Until(start.Add(stallFrom)))
	proxy.StopReading(true)
	time.Sleep(stallFor)
	proxy.StopReading(false)
	if !testenv.Wait(&wg, 90*time.Second) {
		t.Fatal("publishers had not returned 90 s after the network drained again")
	}

	led.settle(t, direct, q)
	testenv.Stop(t, c)
	left := testenv.Count(t, direct, q)
	if left != 0 {
		t.Errorf("%d messages left in %s after the consumer stopped", left, q)
	}
	if n := led.failureCount(); n > 0 {
		t.Errorf("%d publishes failed", n)
	}
	if lg.Count(mq.EventConnectionLost) == 0 {
		t.Errorf("the stalled connection was never declared lost")
	}
	for _, r := range lg.All(mq.EventConnectionLost) {
		t.Logf("lost: %v", r) // a stalled write ("stopped draining") or the heartbeat's read deadline, whichever came first
	}
	mu.Lock()
	defer mu.Unlock()
	led.report(t, lg, nil, fmt.Sprintf("stall_for=%v losses=%d longest_publish=%v left=%d",
		stallFor, lg.Count(mq.EventConnectionLost), longest.Round(time.Millisecond), left))
}
