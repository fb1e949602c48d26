package fxmodule_test

import (
	"context"
	"net/http"
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
			// Standard: middleware.Standard with the topology's policy.
			return fxmodule.Consumer{Queue: "shipping.orders", Handler: mq.HandlerFunc(ship), Standard: true}
		}),
	).Run()
}

// OrderEvents is the app's name for its publisher to orders-events; a
// test provides a fake (fxmoduletest.Publisher) instead.
type OrderEvents interface{ mq.Sender }

// A publisher provided to the app's constructors, a readiness probe, and
// middleware from two modules, placed by their order.
func ExampleAsPublisher() {
	fx.New(
		fx.Supply(mq.Config{URLs: []string{"amqp://guest:guest@127.0.0.1:5672/"}}),
		fxmodule.Module,
		fxmodule.AsPublisher[OrderEvents]("orders-events"),
		fxmodule.AsMiddleware(10, middleware.Recover()),
		fx.Module("audit", fxmodule.AsMiddleware(20, middleware.Logging())),
		fx.Invoke(func(b *mq.Broker, events OrderEvents) {
			http.Handle("/readyz", fxmodule.ReadyHandler(b))
			http.HandleFunc("/orders", func(w http.ResponseWriter, r *http.Request) {
				if err := events.Publish(r.Context(), "order.placed", mq.Message{Body: []byte(`{"id":"o-1"}`)}); err != nil {
					http.Error(w, err.Error(), http.StatusServiceUnavailable)
				}
			})
		}),
	).Run()
}
