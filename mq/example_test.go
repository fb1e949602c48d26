package mq_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/middleware"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/retry"
	"github.com/acemq/acemq-go/topology"
)

// Connect, declare a queue with its failure half, and consume it with the
// standard middleware stack.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	b := mq.New(mq.Config{URLs: []string{"amqp://guest:guest@127.0.0.1:5672/"}})
	if err := b.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer b.Close(context.Background())

	policy := retry.Exponential(6, 10*time.Second)
	if err := b.Declare(ctx, topology.New().Queue("orders.new", topology.DeadLetter(), topology.Retry(policy))); err != nil {
		log.Fatal(err) // a refusal names the queue: errors.Is(err, mq.ErrPreconditionFailed)
	}
	c, err := b.Consume(ctx, "orders.new", mq.HandlerFunc(func(ctx context.Context, d *mq.Delivery) error {
		fmt.Printf("order %s, attempt %d\n", d.Body, d.Attempt())
		return nil // ack; an error goes to the retry ladder
	}), middleware.Standard(policy), mq.WithConcurrency(4))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Stop(context.Background()) // drains in-flight handlers
}

// New with several URLs supervises one connection across a cluster; Start
// fails at its context's deadline when no node answers.
func ExampleNew() {
	b := mq.New(mq.Config{
		URLs:           []string{"amqp://app:secret@rabbit-1:5672/", "amqp://app:secret@rabbit-2:5672/"},
		ConnectionName: "billing",
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.Start(ctx); err != nil {
		log.Fatal(err) // the URLs in the error are redacted
	}
	defer b.Close(context.Background())
}

// Publish returns once the broker confirmed the message; on the default
// exchange a publish to a queue that does not exist is ErrUnroutable.
func ExamplePublisher_Publish() {
	ctx := context.Background()
	b := mq.New(mq.Config{URLs: []string{"amqp://guest:guest@127.0.0.1:5672/"}})
	if err := b.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer b.Close(ctx)
	p := b.Publisher("orders-events")
	defer p.Close()
	err := p.Publish(ctx, "order.placed", mq.Message{Body: []byte(`{"id":"A-100"}`), ContentType: "application/json"})
	switch {
	case errors.Is(err, mq.ErrUnroutable):
		log.Print("no queue is bound for order.placed")
	case err != nil:
		log.Fatal(err)
	}
}

// PublishBatch pipelines many publishes and waits for all their confirms.
func ExamplePublisher_PublishBatch() {
	ctx := context.Background()
	b := mq.New(mq.Config{URLs: []string{"amqp://guest:guest@127.0.0.1:5672/"}})
	if err := b.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer b.Close(ctx)
	msgs := make([]mq.Message, 1000)
	for i := range msgs {
		msgs[i] = mq.Message{Body: []byte(fmt.Sprint(i))}
	}
	var be *mq.BatchError
	if err := b.Publisher("").PublishBatch(ctx, "orders.new", msgs); errors.As(err, &be) {
		for i, err := range be.Errs {
			if err != nil {
				log.Printf("message %d: %v", i, err)
			}
		}
	}
}

// Middleware is a plain func(Handler) Handler, as in net/http.
func ExampleMiddleware() {
	timing := func(next mq.Handler) mq.Handler {
		return mq.HandlerFunc(func(ctx context.Context, d *mq.Delivery) error {
			start := time.Now()
			err := next.Handle(ctx, d)
			log.Printf("%s took %v (outcome %s)", d.MessageId, time.Since(start), d.Outcome())
			return err
		})
	}
	_ = mq.WithMiddleware(timing)
}

// AttemptOf reads x-acemq-attempt as any AceMQ library may have written it.
func ExampleAttemptOf() {
	fmt.Println(mq.AttemptOf(nil))
	fmt.Println(mq.AttemptOf(amqp.Table{mq.HeaderAttempt: int32(3)}))
	fmt.Println(mq.AttemptOf(amqp.Table{mq.HeaderAttempt: "4"}))
	fmt.Println(mq.AttemptOf(amqp.Table{mq.HeaderAttempt: []byte("5")}))
	fmt.Println(mq.AttemptOf(amqp.Table{mq.HeaderAttempt: 2.0}))
	// Output:
	// 1
	// 3
	// 4
	// 5
	// 2
}
