package fxmodule_test

import (
	"context"
	"time"

	"go.uber.org/fx"

	"github.com/acemq/acemq-go/fxmodule"
	"github.com/acemq/acemq-go/middleware"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/retry"
	"github.com/acemq/acemq-go/topology"
)

var policy = retry.Exponential(6, 10*time.Second)

func ship(ctx context.Context, d *mq.Delivery) error { return nil }

// A service in a few lines: the module connects at start, declares the
// merged topology, starts the consumers; at stop it drains them and closes.
func Example() {
	fx.New(
		fx.Supply(mq.Config{URLs: []string{"amqp://guest:guest@127.0.0.1:5672/"}}),
		fxmodule.Module,
		fxmodule.AsTopology(func() *topology.Topology {
			return topology.New().Exchange("orders-events").
				Queue("shipping.orders", topology.DeadLetter(), topology.Retry(policy)).
				Binding("shipping.orders", "orders-events", "order.placed")
		}),
		fxmodule.AsConsumer(func() fxmodule.Consumer {
			return fxmodule.Consumer{Queue: "shipping.orders", Handler: mq.HandlerFunc(ship),
				Options: []mq.ConsumerOption{middleware.Standard(policy)}}
		}),
	).Run()
}
