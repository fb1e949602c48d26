package mq_test

import (
	"context"
	"errors"
	"log"

	"github.com/acemq/acemq-go/mq"
)

// Every publisher is mandatory: a message no queue is bound for fails with
// ErrUnroutable. Events that may have no audience say so.
func ExampleAllowUnroutable() {
	ctx := context.Background()
	b, err := mq.Dial(ctx, "amqp://guest:guest@127.0.0.1:5672/")
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close(ctx)

	orders := b.Publisher("orders") // nil only once some queue has it
	if err := orders.Publish(ctx, "order.placed", mq.Message{Body: []byte(`{"id":1}`)}); errors.Is(err, mq.ErrUnroutable) {
		log.Print("nobody is bound for order.placed")
	}
	audit := b.Publisher("audit", mq.AllowUnroutable()) // fire-and-forget as far as routing goes
	_ = audit.Publish(ctx, "user.login", mq.Message{Body: []byte(`{"user":"ann"}`)})
}
