//go:build integration

package integration

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/acemq/acemq-go/internal/testenv"
	"github.com/acemq/acemq-go/mq"
)

// Issue 3, flaw (1) of amqp091-go's Config.Recovery: it reuses channel
// objects, so a delivery received before a connection loss and settled
// after the reconnect is acked with its old delivery tag on the new
// channel, where that tag is a different message the application never
// processed. The broker forgets that message: lost.
//
// This test holds deliveries across a cut, lets the reconnect deliver the
// same tags again to handlers that hold them too, settles the old ones, and
// then freezes everything (no reconnect, connection cut: every unsettled
// delivery goes back to the queue) to count what the broker still has. Any
// ack that landed on the wrong message shows as a message missing from that
// count, and again at the end, as a message never handled. With the
// supervisor's fresh channel objects, an old delivery can only be settled
// on the channel it came on, which is dead: nothing is lost.
func TestBrokerOldDeliveryNeverAcksAnother(t *testing.T) {
	direct, b, p, q := coreCutRig(t)
	ctx := testenv.Context(t, 60*time.Second)

	const total, acked, prefetch = 30, 4, 8
	ids := make([]string, total)
	msgs := make([]mq.Message, total)
	for i := range ids {
		ids[i] = fmt.Sprintf("m%02d", i)
		msgs[i] = mq.Message{MessageId: ids[i], Body: []byte(ids[i])}
	}
	if err := direct.Publisher("").PublishBatch(ctx, q, msgs); err != nil {
		t.Fatal(err)
	}

	var (
		mu       sync.Mutex
		phase    = 'A'
		held     = map[rune][]string{}
		done     = map[string]int{} // handler returned nil, by id
		releaseA = make(chan struct{})
		releaseB = make(chan struct{})
	)
	heldIn := func(ph rune) int {
		mu.Lock()
		defer mu.Unlock()
		return len(held[ph])
	}
	handler := mq.HandlerFunc(func(_ context.Context, d *mq.Delivery) error {
		mu.Lock()
		ph := phase
		first := d.MessageId < ids[acked] // m00..m03
		if ph == 'A' && first {
			done[d.MessageId]++
			mu.Unlock()
			return nil
		}
		if ph != 'C' {
			held[ph] = append(held[ph], fmt.Sprintf("%s(tag %d)", d.MessageId, d.DeliveryTag))
		}
		mu.Unlock()
		// An application still working when the connection drops: it
		// finishes later and returns nil; the runtime settles then.
		switch ph {
		case 'A':
			<-releaseA
		case 'B':
			<-releaseB
		}
		mu.Lock()
		done[d.MessageId]++
		mu.Unlock()
		return nil
	})
	// WithMaxWaiting(0): the broker sends exactly the prefetch, which the
	// counts below rest on (nothing here waits in-process).
	c, err := b.Consume(ctx, q, handler, mq.WithConcurrency(prefetch), mq.WithPrefetch(prefetch), mq.WithMaxWaiting(0))
	if err != nil {
		t.Fatal(err)
	}

	// Phase A: 4 handled and acked, 8 held (m04..m11, tags 5..12). The
	// broker only sent m08..m11 because it had the 4 acks.
	testenv.Eventually(t, 10*time.Second, func() bool { return heldIn('A') == prefetch }, "phase A did not fill up")
	coreEventuallyCount(t, direct, q, total-acked-prefetch)

	// Cut: the broker requeues the 8 held deliveries. Phase B begins: what
	// the new subscription delivers is held too.
	mu.Lock()
	phase = 'B'
	mu.Unlock()
	p.Cut()
	coreEventuallyCount(t, direct, q, total-acked)
	if err := b.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	// The old handlers finish now: their deliveries' tags (5..12) exist on
	// the new channel as other messages. A reused channel would ack those.
	close(releaseA)
	testenv.Eventually(t, 10*time.Second, func() bool { return heldIn('B') == prefetch }, "phase B did not fill up")
	mu.Lock()
	t.Logf("held before the cut: %v", held['A'])
	t.Logf("held after the reconnect: %v", held['B'])
	mu.Unlock()

	// Freeze: no reconnect, and the connection cut, so the broker requeues
	// everything unsettled. It must still have every message but the 4
	// really handled.
	p.Refuse(true)
	p.Cut()
	coreEventuallyCount(t, direct, q, total-acked)
	time.Sleep(200 * time.Millisecond)
	if n, err := testenv.Ready(ctx, direct, q); err != nil || n != total-acked {
		t.Fatalf("after settling old deliveries the broker holds %d (%v); want %d: an old delivery acked another message", n, err, total-acked)
	}

	// Phase C: everything is handled and acked for real.
	mu.Lock()
	phase = 'C'
	mu.Unlock()
	p.Refuse(false)
	close(releaseB)
	testenv.Eventually(t, 20*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, id := range ids {
			if done[id] == 0 {
				return false
			}
		}
		return true
	}, "not every message was handled")
	coreEventuallyCount(t, direct, q, 0)
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	// Stopped: anything delivered but not acked would be ready again.
	time.Sleep(100 * time.Millisecond)
	if n, err := testenv.Ready(ctx, direct, q); err != nil || n != 0 {
		t.Fatalf("after the consumer stopped the queue holds %d (%v); want 0", n, err)
	}
	mu.Lock()
	defer mu.Unlock()
	var twice []string
	for id, n := range done {
		if n > 1 {
			twice = append(twice, id)
		}
	}
	sort.Strings(twice)
	t.Logf("handled more than once (redelivered after a cut, as at-least-once allows): %v", twice)
}

// coreEventuallyCount waits until q holds n ready messages.
func coreEventuallyCount(t *testing.T, b *mq.Broker, q string, n int) {
	t.Helper()
	var got int
	var err error
	testenv.Eventually(t, 10*time.Second, func() bool {
		got, err = testenv.Ready(context.Background(), b, q)
		return err == nil && got == n
	}, "%s holds %d ready messages (%v); want %d", q, got, err, n)
}
