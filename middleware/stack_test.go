package middleware

import (
	"context"
	"errors"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/mqtest"
	"github.com/acemq/acemq-go/retry"
)

// Stack is Standard's middleware as a list: chained around a handler it
// retries, then dead-letters, as Standard does in a consumer.
func TestStackAroundAHandler(t *testing.T) {
	p := retry.Fixed(3, time.Millisecond)
	var hops []string
	calls := 0
	h := mqtest.Chain(mq.HandlerFunc(func(context.Context, *mq.Delivery) error {
		calls++
		return errors.New("down")
	}), nil, Stack(p, WithoutDeclare())...)
	d := mqtest.NewDelivery("q", amqp.Delivery{}, mqtest.OnHop(func(_ context.Context, q string, _ mq.Outcome, _ mq.Message) error {
		hops = append(hops, q)
		return nil
	}))
	if err := h.Handle(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	if calls != 3 || len(hops) != 1 || hops[0] != "q.dlq" || d.Outcome() != mq.OutcomeDeadLetter {
		t.Fatalf("%d calls, hops %v, outcome %s", calls, hops, d.Outcome())
	}
	if len(Stack(p)) != len(standardStack(p, nil)) || len(Stack(p, WithoutDeclare())) != len(Stack(p))-1 {
		t.Fatal("Stack is not Standard's list")
	}
}
