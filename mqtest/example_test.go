package mqtest_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/acemq/acemq-go/middleware"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/mqtest"
	"github.com/acemq/acemq-go/retry"
)

// A handler that always fails, followed through the whole ladder: two
// in-process retries, three broker rungs, the dead-letter queue. In a test,
// pass the *testing.T instead of nil.
func ExampleConsumer_Run() {
	down := mq.HandlerFunc(func(context.Context, *mq.Delivery) error { return errors.New("carrier down") })
	c := mqtest.New(nil, "shipping.orders", down, middleware.Standard(retry.Exponential(6, 10*time.Second)))
	for _, r := range c.Run(mq.Message{MessageId: "o-1"}) {
		fmt.Println(r)
	}
	fmt.Println("fake time passed:", c.Now().Sub(mqtest.Epoch))
	// Output:
	// retry after 3 attempt(s), retry to shipping.orders.retry.40s (attempt 4): carrier down
	// retry after 1 attempt(s), retry to shipping.orders.retry.80s (attempt 5): carrier down
	// retry after 1 attempt(s), retry to shipping.orders.retry.160s (attempt 6): carrier down
	// dead-letter after 1 attempt(s), dead-letter to shipping.orders.dlq (attempt 7): carrier down
	// fake time passed: 5m10s
}

// A fake publisher for code that is handed an mq.Sender.
func ExamplePublisher() {
	var events mqtest.Publisher
	_ = events.Publish(context.Background(), "order.placed", mq.Message{Body: []byte(`{"id":"o-1"}`)})
	for _, m := range events.Messages() {
		fmt.Println(m.RoutingKey, string(m.Message.Body))
	}
	// Output: order.placed {"id":"o-1"}
}
