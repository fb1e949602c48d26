package middleware_test

import (
	"context"
	"errors"
	"log"
	"time"

	"github.com/acemq/acemq-go/middleware"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/retry"
	"github.com/acemq/acemq-go/topology"
)

var errInvalid = errors.New("invalid order")

// Standard is the whole stack in the right order; the handler's error
// decides the outcome.
func ExampleStandard() {
	ctx := context.Background()
	b := mq.New(mq.Config{URLs: []string{"amqp://guest:guest@127.0.0.1:5672/"}})
	if err := b.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer b.Close(ctx)
	policy := retry.Exponential(6, 10*time.Second)
	handle := mq.HandlerFunc(func(ctx context.Context, d *mq.Delivery) error {
		switch {
		case len(d.Body) == 0:
			return middleware.Park(errors.New("empty order")) // shipping.orders.parked
		case d.ContentType != "application/json":
			return middleware.Reject(errInvalid) // shipping.orders.dlq, no retries
		}
		return nil // ack; any other error climbs the ladder
	})
	c, err := b.Consume(ctx, "shipping.orders", handle,
		middleware.Standard(policy, middleware.WithTimeout(30*time.Second)))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Stop(ctx)
}

// StandardDeclared takes the policy the Broker declared with the queue:
// the policy is written once.
func ExampleStandardDeclared() {
	ctx := context.Background()
	b := mq.New(mq.Config{URLs: []string{"amqp://guest:guest@127.0.0.1:5672/"}})
	if err := b.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer b.Close(ctx)
	t := topology.New().Queue("shipping.orders", topology.DeadLetter(), topology.Retry(retry.Exponential(6, 10*time.Second)))
	if err := b.Declare(ctx, t); err != nil {
		log.Fatal(err)
	}
	handle := mq.HandlerFunc(func(ctx context.Context, d *mq.Delivery) error { return nil })
	c, err := b.Consume(ctx, "shipping.orders", handle, middleware.StandardDeclared())
	if err != nil {
		log.Fatal(err) // mq.ErrInvalid when the Broker declared no policy for the queue
	}
	defer c.Stop(ctx)
}

// The built-ins compose by hand too; this is declare=false with a
// classifier, for a consumer whose login may not declare queues.
func ExampleParking() {
	permanent := func(err error) mq.Outcome {
		if errors.Is(err, errInvalid) {
			return mq.OutcomeDeadLetter
		}
		return ""
	}
	policy := retry.Fixed(3, time.Second)
	_ = mq.WithMiddleware(
		middleware.Logging(),
		middleware.RetryLadder(policy),
		middleware.Parking(permanent),
		middleware.Recover(),
	)
}
