package mqtest_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/mqtest"
	"github.com/acemq/acemq-go/topology"
)

// Given the service's topology, the fake routes as the broker would: a
// mandatory publish no binding matches fails as it would in production.
func ExamplePublisher_topology() {
	topo := topology.New().
		Exchange("orders-events", topology.Topic).
		Queue("shipping.orders").
		Binding("shipping.orders", "orders-events", "order.*")
	events := &mqtest.Publisher{Topology: topo, Exchange: "orders-events"}
	ctx := context.Background()
	fmt.Println(events.Publish(ctx, "order.placed", mq.Message{}))
	err := events.Publish(ctx, "invoice.sent", mq.Message{})
	fmt.Println(errors.Is(err, mq.ErrUnroutable), err)
	for _, m := range events.Messages() {
		fmt.Println(m.RoutingKey, m.Queues)
	}
	// Output:
	// <nil>
	// true mq: publish to exchange "orders-events" with key "invoice.sent": mq: unroutable
	// order.placed [shipping.orders]
}
