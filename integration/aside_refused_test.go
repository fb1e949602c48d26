//go:build integration

package integration

// A set-aside the broker refuses (the field soak, seed 4242: the .dlq's
// node was down and the hop was nacked) returns the original to its queue;
// when it comes back its attempts are used up, so it must be set aside
// again, never handed to the handler for a fourth attempt.

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acemq/acemq-go/internal/testenv"
	"github.com/acemq/acemq-go/middleware"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/retry"
	"github.com/acemq/acemq-go/topology"
)

func TestAsideRefusedIsSetAsideAgainNotRetried(t *testing.T) {
	b, lg := consBroker(t)
	p := retry.Waits(10*time.Millisecond, 10*time.Millisecond) // 3 attempts, all in-process
	q := testenv.Queue(t, b, p, topology.Classic())
	dlq := topology.DeadLetterQueue(q)

	// A .dlq that refuses every publish: the broker nacks the hop.
	accept := refusing(t, b, topology.Queue{Name: dlq, Durable: true})

	var calls atomic.Int32
	h := mq.HandlerFunc(func(_ context.Context, d *mq.Delivery) error {
		n := calls.Add(1)
		return fmt.Errorf("fails on call %d (attempt %d)", n, d.Attempt())
	})
	c, err := b.Consume(testenv.Context(t, 20*time.Second), q, h,
		middleware.Standard(p, middleware.WithoutDeclare()), mq.WithRequeuePause(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer testenv.Stop(t, c)
	testenv.Publish(t, b, q, mq.Message{Body: []byte("x"), MessageId: "aside-refused"})

	// Several refused set-asides: the message came back at least twice.
	if !testenv.Poll(20*time.Second, func() bool { return lg.Count(mq.EventSetAsideFailed) >= 3 }) {
		t.Fatalf("%d refused set-asides within 20 s, want 3 (events: %s)", lg.Count(mq.EventSetAsideFailed), lg.Events())
	}
	if n := calls.Load(); n != 3 {
		t.Fatalf("the handler was called %d times with a 3-attempt policy while %s refused the set-aside (%d refused): want 3",
			n, dlq, lg.Count(mq.EventSetAsideFailed))
	}

	// The .dlq accepts again: the message lands there, still after 3 calls.
	accept()
	testenv.WaitCount(t, b, dlq, 1, 20*time.Second)
	testenv.WaitCount(t, b, q, 0, 10*time.Second)
	if n := calls.Load(); n != 3 {
		t.Fatalf("the handler was called %d times by the time the message reached %s: want 3", n, dlq)
	}
	got := testenv.GetAll(t, b, dlq)
	if len(got) != 1 {
		t.Fatalf("%d messages in %s, want 1", len(got), dlq)
	}
	hd := got[0].Headers
	if a := mq.AttemptOf(hd); a != 4 {
		t.Errorf("x-acemq-attempt on the dead letter is %d, want 4 (3 attempts used)", a)
	}
	if s := hd[mq.HeaderSourceQueue]; s != q {
		t.Errorf("x-acemq-source-queue is %v, want %s", s, q)
	}
	if r := hd[mq.HeaderReason]; r != string(mq.ReasonExhausted) {
		t.Errorf("x-acemq-reason is %v, want %s", r, mq.ReasonExhausted)
	}
	if e, _ := hd[mq.HeaderError].(string); !strings.Contains(e, "fails on call 3 (attempt 3)") {
		t.Errorf("x-acemq-error is %q, want the third attempt's error", e)
	}
	if at, ok := hd[mq.HeaderFailedAt].(time.Time); !ok || at.IsZero() {
		t.Errorf("x-acemq-failed-at is %v (%T), want a timestamp", hd[mq.HeaderFailedAt], hd[mq.HeaderFailedAt])
	}
	if got[0].MessageId != "aside-refused" || string(got[0].Body) != "x" {
		t.Errorf("dead letter is %q %q, want the original", got[0].MessageId, got[0].Body)
	}
}
