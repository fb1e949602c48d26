//go:build integration

package integration

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
	"github.com/acemq/acemq-go/topology"
)

// The README's plain-Go example gives the policy once: declared with the
// queue (topology.Retry), and the consumer's Standard stack takes it from
// the Broker. A failing message walks that policy: an in-process wait, a
// broker rung, then .dlq after exactly its attempts.
func TestFateStandardTakesTheDeclaredPolicy(t *testing.T) {
	b, _ := consBroker(t)
	policy := retry.Waits(20*time.Millisecond, time.Second).With(retry.InProcessLimit(100 * time.Millisecond))
	q := testenv.Name(t)
	testenv.CleanupDerived(t, q, policy)
	ctx := testenv.Context(t, 60*time.Second)
	if err := b.Declare(ctx, topology.New().Queue(q, topology.DeadLetter(), topology.Retry(policy))); err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	h := mq.HandlerFunc(func(context.Context, *mq.Delivery) error {
		calls.Add(1)
		return errors.New("down")
	})
	c, err := b.Consume(ctx, q, h, middleware.StandardDeclared())
	if err != nil {
		t.Fatalf("Consume with the declared policy: %v", err)
	}
	defer testenv.Stop(t, c)
	testenv.Publish(t, b, q, mq.Message{MessageId: "m1", Body: []byte("x")})
	testenv.WaitCount(t, b, topology.DeadLetterQueue(q), 1, 30*time.Second)
	if n := calls.Load(); n != int32(policy.Attempts()) {
		t.Errorf("handler called %d times, want the declared policy's %d attempts", n, policy.Attempts())
	}
	got := testenv.GetAll(t, b, topology.DeadLetterQueue(q))
	if len(got) != 1 || got[0].Headers[mq.HeaderReason] != string(mq.ReasonExhausted) || mq.AttemptOf(got[0].Headers) != policy.Attempts()+1 {
		t.Errorf(".dlq holds %d message(s), headers %v; want one, exhausted after %d attempts", len(got), headersOf(got), policy.Attempts())
	}
}

// A consumer that takes the declared policy of a queue the Broker declared
// with none is refused at the call, saying so; nothing is subscribed.
func TestFateStandardDeclaredWithoutAPolicyIsRefused(t *testing.T) {
	b, _ := consBroker(t)
	q := testenv.Name(t)
	testenv.NothingLeft(t, q, topology.DeadLetterQueue(q), topology.ParkedQueue(q))
	testenv.CleanupDerived(t, q, retry.Policy{}) // DeadLetter() derives .dlq and .parked
	ctx := testenv.Context(t, 30*time.Second)
	if err := b.Declare(ctx, topology.New().Queue(q, topology.DeadLetter())); err != nil {
		t.Fatal(err)
	}
	h := mq.HandlerFunc(func(context.Context, *mq.Delivery) error { return nil })
	c, err := b.Consume(ctx, q, h, middleware.StandardDeclared())
	if err == nil {
		testenv.Stop(t, c)
		t.Fatal("Consume of a queue declared with no retry policy succeeded")
	}
	if !errors.Is(err, mq.ErrInvalid) || !strings.Contains(err.Error(), "topology.Retry") {
		t.Errorf("Consume = %v, want ErrInvalid naming topology.Retry", err)
	}
}

func headersOf(ds []amqp.Delivery) []amqp.Table {
	var out []amqp.Table
	for _, d := range ds {
		out = append(out, d.Headers)
	}
	return out
}
