//go:build integration

package integration

// Issue 39, item 4: a derived queue owned by someone else. An operator
// declared <q>.dlq with a length limit; the service's topology derives
// <q>.dlq with no arguments, so declaring it is PRECONDITION_FAILED and
// the app cannot start. topology.Existing() says the queue is declared
// elsewhere: the declare checks it passively, and so does the consumer's
// own declare of its failure half.

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.uber.org/fx"

	"github.com/acemq/acemq-go/fxmodule"
	"github.com/acemq/acemq-go/internal/testenv"
	"github.com/acemq/acemq-go/middleware"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/retry"
	"github.com/acemq/acemq-go/topology"
)

func TestExistingDeadLetterQueueOwnedByTheOperator(t *testing.T) {
	policy := retry.Exponential(2, 10*time.Millisecond)
	q := testenv.Name(t)
	dlq := topology.DeadLetterQueue(q)
	testenv.NothingLeft(t, q, dlq, topology.ParkedQueue(q))
	testenv.CleanupDerived(t, q, policy)
	helper := testenv.Broker(t, mq.Config{Logger: testenv.Discard()})
	ctx := testenv.Context(t, 30*time.Second)

	// The operator's .dlq: classic, durable, at most 1000 messages.
	ch, err := helper.Channel(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(dlq, true, false, false, false, amqp.Table{"x-max-length": int32(1000)}); err != nil {
		t.Fatalf("the operator's declare: %v", err)
	}
	_ = ch.Close()

	topo := func(existing bool) *topology.Topology {
		t := topology.New().Queue(q, topology.DeadLetter(), topology.Retry(policy))
		if existing {
			t.Queue(dlq, topology.Existing())
		}
		return t
	}
	// Without the option, Declare is refused, and the error names the way.
	err = helper.Declare(ctx, topo(false))
	if !errors.Is(err, mq.ErrPreconditionFailed) || !strings.Contains(err.Error(), "topology.Existing()") || !strings.Contains(err.Error(), dlq) {
		t.Fatalf("Declare without Existing: %v, want PRECONDITION_FAILED naming %s and topology.Existing()", err, dlq)
	}
	// So does the fx app's start.
	handled := make(chan struct{}, 1)
	app := func(existing bool) *fx.App {
		return fx.New(fx.NopLogger, fxConfig(t), fxmodule.Module,
			fxmodule.AsTopology(topo(existing)),
			fxmodule.AsConsumer(func() fxmodule.Consumer {
				return fxmodule.Consumer{Queue: q, Standard: true, Handler: mq.HandlerFunc(func(ctx context.Context, d *mq.Delivery) error {
					handled <- struct{}{}
					return middleware.Reject(errors.New("not a valid invoice"))
				})}
			}))
	}
	failing := app(false)
	if err := failing.Start(testenv.Context(t, 20*time.Second)); err == nil || !strings.Contains(err.Error(), "topology.Existing()") {
		_ = failing.Stop(testenv.Context(t, 20*time.Second))
		t.Fatalf("fx start without Existing: %v, want the refusal naming topology.Existing()", err)
	}

	// With it, Declare passes, and the app starts: the consumer's own
	// declare of its failure half checks the operator's .dlq too.
	if err := helper.Declare(ctx, topo(true)); err != nil {
		t.Fatalf("Declare with Existing: %v", err)
	}
	running := app(true)
	if err := running.Start(testenv.Context(t, 20*time.Second)); err != nil {
		t.Fatalf("fx start with Existing: %v", err)
	}
	defer func() {
		if err := running.Stop(testenv.Context(t, 20*time.Second)); err != nil {
			t.Errorf("stop: %v", err)
		}
	}()
	testenv.Publish(t, helper, q, mq.Message{MessageId: "inv-1", Body: []byte("{}")})
	select {
	case <-handled:
	case <-time.After(10 * time.Second):
		t.Fatal("the consumer did not handle the message")
	}
	// The rejected message lands in the operator's .dlq, which still has
	// its limit (a declare of it with other arguments would be refused).
	testenv.WaitCount(t, helper, dlq, 1, 10*time.Second)
	ch, err = helper.Channel(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	if _, err := ch.QueueDeclare(dlq, true, false, false, false, amqp.Table{"x-max-length": int32(1000)}); err != nil {
		t.Fatalf("the operator's .dlq lost its arguments: %v", err)
	}
}
