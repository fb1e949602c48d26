package typed_test

import (
	"context"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/mqtest"
	"github.com/acemq/acemq-go/typed"
)

type Order struct {
	ID string `json:"id"`
}

// A handler that receives an Order, not bytes.
func ExampleHandler() {
	ship := typed.Handler(func(ctx context.Context, d *mq.Delivery, o Order) error {
		fmt.Println("shipping", o.ID)
		return nil
	})
	// Under a consumer: b.Consume(ctx, "shipping.orders", ship, middleware.Standard(policy)).
	d := mqtest.NewDelivery("shipping.orders", amqp.Delivery{Body: []byte(`{"id":"o-1"}`)})
	fmt.Println(ship.Handle(context.Background(), d))
	// Output:
	// shipping o-1
	// <nil>
}

// Publishing an Order: the body is its JSON, the content type
// application/json.
func ExamplePublish() {
	var events mqtest.Publisher // in a service: an *mq.Publisher, or fxmodule.AsPublisher's
	if err := typed.Publish(context.Background(), &events, "order.placed", Order{ID: "o-1"}); err != nil {
		fmt.Println(err)
	}
	m := events.Messages()[0].Message
	fmt.Println(m.ContentType, string(m.Body))
	// Output: application/json {"id":"o-1"}
}
