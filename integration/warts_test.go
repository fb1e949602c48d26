//go:build integration

package integration

// Issue 12's warts in the consumer runtime: a start error names what
// failed in words, never a Go type; an outer middleware sees the ack
// outcome before the runtime settles.

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq-go/internal/testenv"
	"github.com/acemq/acemq-go/middleware"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/retry"
	"github.com/acemq/acemq-go/topology"
)

func TestConsumerStartErrorHasNoGoTypeName(t *testing.T) {
	t.Parallel()
	b, _ := consBroker(t)
	p := retry.Exponential(2, time.Second)
	q := testenv.Name(t)
	testenv.CleanupDerived(t, q, p)
	// The source queue exists; its .dlq exists as a quorum queue, so the
	// failure half's classic .dlq is refused.
	if err := b.Declare(testenv.Context(t, 10*time.Second), topology.New().Queue(q).Queue(topology.DeadLetterQueue(q), topology.Quorum())); err != nil {
		t.Fatal(err)
	}
	_, err := b.Consume(testenv.Context(t, 10*time.Second), q, mq.HandlerFunc(func(context.Context, *mq.Delivery) error { return nil }),
		middleware.Standard(p))
	if err == nil {
		t.Fatal("Consume succeeded; want the refused declaration")
	}
	msg := err.Error()
	if strings.Contains(msg, "*middleware.") || strings.Contains(msg, "*mq.") {
		t.Errorf("the start error shows a Go type name: %s", msg)
	}
	if !strings.Contains(msg, "DeclareOnStart") || !strings.Contains(msg, topology.DeadLetterQueue(q)) {
		t.Errorf("the start error does not say what was refused: %s", msg)
	}
}

func TestOuterMiddlewareSeesTheAckOutcome(t *testing.T) {
	t.Parallel()
	b, _ := consBroker(t)
	p := retry.Exponential(2, 50*time.Millisecond)
	q := testenv.Queue(t, b, p)
	seen := make(chan mq.Outcome, 2)
	outer := func(next mq.Handler) mq.Handler {
		return mq.HandlerFunc(func(ctx context.Context, d *mq.Delivery) error {
			err := next.Handle(ctx, d)
			seen <- d.Outcome()
			return err
		})
	}
	c, err := b.Consume(testenv.Context(t, 10*time.Second), q, mq.HandlerFunc(func(context.Context, *mq.Delivery) error { return nil }),
		mq.WithMiddleware(outer), middleware.Standard(p))
	if err != nil {
		t.Fatal(err)
	}
	defer testenv.Stop(t, c)
	testenv.Publish(t, b, q, mq.Message{Body: []byte("x")})
	select {
	case o := <-seen:
		if o != mq.OutcomeAck {
			t.Errorf("the outer middleware saw outcome %q, want %q", o, mq.OutcomeAck)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("not handled")
	}
}
