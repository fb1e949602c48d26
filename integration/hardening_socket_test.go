//go:build integration

package integration

// Issue 11, item 7: every call is bounded by its context on any socket,
// one that stopped draining included; the Publisher recovers on its own;
// Broker.Close(ctx) returns by ctx's deadline; nothing outlives Close.

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/acemq/acemq-go/internal/testenv"
	"github.com/acemq/acemq-go/mq"
)

// hardStall publishes 12 MiB messages (more than the socket buffers hold) from 4 goroutines, each call with
// a 2 s context, for d, and returns the longest call and how many ended
// with their context.
func hardStall(ctx context.Context, pub *mq.Publisher, q string, d time.Duration) (longest time.Duration, timedOut, calls int, done bool) {
	body := make([]byte, 12<<20)
	var mu sync.Mutex
	var wg sync.WaitGroup
	until := time.Now().Add(d)
	for range 4 {
		wg.Go(func() {
			for time.Now().Before(until) && ctx.Err() == nil {
				pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				start := time.Now()
				err := pub.Publish(pctx, q, mq.Message{Body: body})
				took := time.Since(start)
				cancel()
				mu.Lock()
				calls++
				longest = max(longest, took)
				if errors.Is(err, context.DeadlineExceeded) {
					timedOut++
				}
				mu.Unlock()
			}
		})
	}
	done = testenv.Wait(&wg, d+15*time.Second)
	mu.Lock()
	defer mu.Unlock()
	return longest, timedOut, calls, done
}

func TestHardeningStalledSocket(t *testing.T) {
	testenv.NoLeaks(t)
	direct := testenv.Broker(t, mq.Config{})
	q := coreQueue(t, direct, nil)
	b, proxy, lg := hardBroker(t, mq.Config{Heartbeat: time.Second})
	defer proxy.Cut() // whatever happens, nothing stays wedged past the test
	ctx := testenv.Context(t, 90*time.Second)
	pub := b.Publisher("")
	if err := pub.Publish(ctx, q, mq.Message{Body: []byte("warm")}); err != nil {
		t.Fatal(err)
	}

	// The socket stops draining: every Publish returns by its 2 s deadline.
	proxy.StopReading(true)
	longest, timedOut, calls, done := hardStall(ctx, pub, q, 4*time.Second)
	if !done {
		t.Fatalf("publishes with a 2 s context had not returned 19 s after the socket stopped draining (%d calls returned, the longest %v)", calls, longest)
	}
	if longest > 2500*time.Millisecond {
		t.Errorf("a Publish with a 2 s context took %v on a socket that stopped draining", longest)
	}
	if timedOut == 0 {
		t.Errorf("no publish timed out in %d calls: the socket never stopped draining?", calls)
	}
	t.Logf("stalled socket: %d calls, %d ended with their 2 s context, the longest took %v", calls, timedOut, longest.Round(time.Millisecond))
	if !testenv.Poll(10*time.Second, func() bool { return lg.Count(mq.EventConnectionLost) > 0 }) {
		t.Errorf("the stalled connection was never declared lost")
	}

	// The network drains again: the Publisher carries on by itself.
	proxy.StopReading(false)
	recovered := time.Now()
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err := pub.Publish(pctx, q, mq.Message{Body: []byte("after")})
	cancel()
	if err != nil {
		t.Fatalf("the Publisher did not recover: %v (events: %s)", err, lg.Events())
	}
	t.Logf("publishing again %v after the network drained again", time.Since(recovered).Round(time.Millisecond))

	// Stalled again, with publishes in flight: Close(3 s) returns by then.
	if err := pub.Publish(ctx, q, mq.Message{Body: []byte("warm again")}); err != nil {
		t.Fatal(err)
	}
	proxy.StopReading(true)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			body := make([]byte, 12<<20)
			for range 40 {
				pctx, cancel := context.WithTimeout(ctx, 20*time.Second)
				err := pub.Publish(pctx, q, mq.Message{Body: body})
				cancel()
				if errors.Is(err, mq.ErrClosed) {
					return
				}
			}
		})
	}
	time.Sleep(500 * time.Millisecond)
	cctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	start := time.Now()
	_ = b.Close(cctx)
	if took := time.Since(start); took > 3500*time.Millisecond {
		t.Errorf("Broker.Close with a 3 s context took %v on a socket that stopped draining", took)
	} else {
		t.Logf("Broker.Close(3 s) on a stalled socket returned after %v", took.Round(time.Millisecond))
	}
	if !testenv.Wait(&wg, 10*time.Second) {
		t.Errorf("publishes still running 10 s after Close")
	}
}
