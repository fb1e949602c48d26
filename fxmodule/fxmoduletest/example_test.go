package fxmoduletest_test

import (
	"context"
	"fmt"

	"github.com/acemq/acemq-go/fxmodule/fxmoduletest"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/topology"
)

// The fake of the publisher fxmodule.AsPublisher provides: to a topic
// exchange it is an event publisher, so an event nobody subscribes to is
// taken (and dropped), as on the broker.
func ExamplePublisher() {
	topo := topology.New().
		Exchange("orders-events", topology.Topic).
		Queue("shipping.orders").
		Binding("shipping.orders", "orders-events", "order.placed")
	events := fxmoduletest.Publisher(topo, "orders-events")
	ctx := context.Background()
	fmt.Println(events.Publish(ctx, "order.placed", mq.Message{}))
	fmt.Println(events.Publish(ctx, "order.shipped", mq.Message{}))
	for _, m := range events.Messages() {
		fmt.Println(m.RoutingKey, m.Queues)
	}
	// Output:
	// <nil>
	// <nil>
	// order.placed [shipping.orders]
	// order.shipped []
}
