package ops_test

import (
	"context"
	"fmt"
	"log"

	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/ops"
)

// Replay moves dead letters back to the queue they failed on, one at a
// time, acknowledging each only after its republish is confirmed.
func ExampleReplay() {
	ctx := context.Background()
	b := mq.New(mq.Config{URLs: []string{"amqp://guest:guest@127.0.0.1:5672/"}})
	if err := b.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer b.Close(ctx)
	res, err := ops.Replay(ctx, b, "shipping.orders.dlq", ops.ReplayOptions{Limit: 100})
	if err != nil {
		log.Fatal(err) // what was moved stays moved; what was not stays in the .dlq
	}
	fmt.Printf("moved %d of %d: %v\n", res.Moved, res.Total, res.Targets)
}

// Peek shows what is in a queue without taking it out.
func ExamplePeek() {
	ctx := context.Background()
	b := mq.New(mq.Config{URLs: []string{"amqp://guest:guest@127.0.0.1:5672/"}})
	if err := b.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer b.Close(ctx)
	msgs, err := ops.Peek(ctx, b, "shipping.orders.parked", 5)
	if err != nil {
		log.Fatal(err)
	}
	for _, m := range msgs {
		fmt.Printf("%s attempt=%d reason=%s error=%q from=%s: %s\n",
			m.MessageId, m.Attempt, m.Reason, m.Error, m.SourceQueue, m.Preview)
	}
}
