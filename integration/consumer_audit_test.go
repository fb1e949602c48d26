//go:build integration

package integration

// The consumer defects of the second audit (issue 22) and the flapping
// alarm on a single cut (issue 24), each reproduced on the real broker.

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acemq/acemq-go/internal/testenv"
	"github.com/acemq/acemq-go/mq"
)

// A handler that ignores its context holds its own slot across a lost
// connection, not the consumer: the other workers go on with the new
// subscription at once.
func TestAuditStuckHandlerDoesNotStopResubscription(t *testing.T) {
	direct, b, p, q := coreCutRig(t)
	release := make(chan struct{})
	var releaseOnce sync.Once
	free := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(free) // before the broker closes: it waits for the handler
	var stuck atomic.Bool
	var handled sync.Map
	var n atomic.Int32
	h := mq.HandlerFunc(func(ctx context.Context, d *mq.Delivery) error {
		if d.MessageId == "stuck" {
			stuck.Store(true)
			<-release // ignores ctx
			return nil
		}
		if _, dup := handled.LoadOrStore(d.MessageId, true); !dup {
			n.Add(1)
		}
		return nil
	})
	c, err := b.Consume(testenv.Context(t, 10*time.Second), q, h, mq.WithConcurrency(4))
	if err != nil {
		t.Fatal(err)
	}
	testenv.Publish(t, direct, q, mq.Message{MessageId: "stuck"})
	testenv.Eventually(t, 10*time.Second, stuck.Load, "the stuck handler never started")
	p.Cut()
	testenv.Publish(t, direct, q, consMessages("after", 10)...)
	ok := testenv.Poll(10*time.Second, func() bool { return n.Load() == 10 })
	if !ok {
		t.Fatalf("%d of 10 messages published after the cut handled in 10 s, with 3 of 4 workers free", n.Load())
	}
	// The consumer still owns the stuck handler: Done waits for it.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := c.Stop(ctx); err == nil {
		t.Fatal("Stop returned nil with a handler still running")
	}
	free()
	select {
	case <-c.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done not closed 10 s after the stuck handler returned")
	}
}
