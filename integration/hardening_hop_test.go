//go:build integration

package integration

// Issue 11, item 2: a hop whose headers would push the message over
// frame_max is still made — the library trims what it added (a shorter
// x-acemq-error first) — and never loops.

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/internal/testenv"
	"github.com/acemq/acemq-go/middleware"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/retry"
)

// hardFrameMax is the frame_max the local broker and amqp091-go agree on by default.
const hardFrameMax = 128 * 1024

func TestHardeningHopFitsTheFrame(t *testing.T) {
	b, _, lg := hardBroker(t, mq.Config{})
	ctx := testenv.Context(t, 60*time.Second)
	p := retry.Exponential(2, 10*time.Millisecond)
	q := testenv.Queue(t, b, p)
	// A message whose headers leave 3000 bytes of the frame: room for the
	// failure headers, not for a 4 KiB error text.
	pad := strings.Repeat("p", hardFrameMax-8-3000)
	if err := b.Publisher("").Publish(ctx, q, mq.Message{MessageId: "big", Headers: amqp.Table{"pad": pad}}); err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	long := strings.Repeat("e", 5000)
	c, err := b.Consume(ctx, q, mq.HandlerFunc(func(context.Context, *mq.Delivery) error {
		calls.Add(1)
		return middleware.Reject(errors.New(long))
	}), middleware.Standard(p), mq.WithRequeuePause(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	testenv.WaitCount(t, b, q+".dlq", 1, 10*time.Second)
	time.Sleep(300 * time.Millisecond)
	testenv.Stop(t, c)
	if n := calls.Load(); n != 1 {
		t.Errorf("the handler ran %d times; want 1 (rejected once, set aside)", n)
	}
	got := testenv.GetAll(t, b, q+".dlq")
	if len(got) != 1 {
		t.Fatalf("%d messages in .dlq", len(got))
	}
	h := got[0].Headers
	e, _ := h[mq.HeaderError].(string)
	if e == "" || len(e) >= 4096 || !strings.HasPrefix(e, "eeee") || !strings.HasSuffix(e, "…") {
		t.Errorf("x-acemq-error is %d bytes (%.20q…); want it cut short to fit, marked with …", len(e), e)
	}
	if h[mq.HeaderReason] != string(mq.ReasonRejected) || h["pad"] != pad {
		t.Errorf("the set-aside copy lost its reason or its own headers: reason %v, pad kept %v", h[mq.HeaderReason], h["pad"] == pad)
	}
	if n := lg.Count(mq.EventConnectionLost); n != 0 {
		t.Errorf("%d connections lost", n)
	}
	t.Logf("set aside with x-acemq-error cut to %d bytes; handler ran %d time(s)", len(e), calls.Load())
}

// A message already at the frame's limit as delivered: even trimmed, its
// hop cannot carry the failure headers. It is refused before the wire
// (ErrInvalid: the connection lives), and the middleware treats that as a
// hop it cannot make: the original goes back to its queue after a pause,
// visibly, never dropped and never a hot loop.
func TestHardeningHopThatCannotFit(t *testing.T) {
	b, _, lg := hardBroker(t, mq.Config{})
	ctx := testenv.Context(t, 60*time.Second)
	p := retry.Exponential(2, 10*time.Millisecond)
	q := testenv.Queue(t, b, p)
	pad := strings.Repeat("p", hardFrameMax-8-120)
	if err := b.Publisher("").Publish(ctx, q, mq.Message{MessageId: "full", Headers: amqp.Table{"pad": pad}}); err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	c, err := b.Consume(ctx, q, mq.HandlerFunc(func(context.Context, *mq.Delivery) error {
		calls.Add(1)
		return middleware.Reject(errors.New("no"))
	}), middleware.Standard(p), mq.WithRequeuePause(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	testenv.Stop(t, c)
	n := calls.Load()
	if n < 1 || n > 6 {
		t.Errorf("the handler ran %d times in 2 s with a 500 ms requeue pause; want 1 to 6", n)
	}
	failed := lg.All(mq.EventSetAsideFailed)
	if len(failed) == 0 || !strings.Contains(failed[0].String(), "invalid") {
		t.Errorf("no %s record saying the hop was invalid: %v", mq.EventSetAsideFailed, failed)
	}
	if lost := lg.Count(mq.EventConnectionLost); lost != 0 {
		t.Errorf("%d connections lost", lost)
	}
	// The broker requeues what the stopped consumer held as its channel closes.
	if !testenv.Poll(5*time.Second, func() bool { return testenv.Count(t, b, q) == 1 }) {
		t.Errorf("%d messages in %s after stop; want the original back", testenv.Count(t, b, q), q)
	}
	t.Logf("a hop that cannot fit: handler ran %d times in 2 s, %d set-aside failures logged, no connection lost", n, len(failed))
}
