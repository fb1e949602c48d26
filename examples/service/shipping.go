package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/acemq/acemq-go/fxmodule"
	"github.com/acemq/acemq-go/middleware"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/retry"
	"github.com/acemq/acemq-go/topology"
	"github.com/acemq/acemq-go/typed"
)

// The service's names. SERVICE_PREFIX puts a prefix on each (the test that
// runs the service against a broker uses goit.*, so it can share one).
var (
	Exchange      = os.Getenv("SERVICE_PREFIX") + "orders-events"
	ShippingQueue = os.Getenv("SERVICE_PREFIX") + "shipping.orders"
)

// Topology is the service's topology. The retry policy is written here
// and only here: the consumer (Standard: true) runs the policy this
// declares, and the tests read it from here too.
func Topology() *topology.Topology {
	return topology.New().
		Exchange(Exchange, topology.Topic).
		Queue(ShippingQueue, topology.DeadLetter(), topology.Retry(retry.Exponential(5, 10*time.Second))).
		Binding(ShippingQueue, Exchange, "order.placed")
}

// Order is what order.placed carries.
type Order struct {
	ID      string `json:"id"`
	Address string `json:"address"`
	Items   int    `json:"items"`
}

// Shipped is what order.shipped carries.
type Shipped struct {
	OrderID  string `json:"order_id"`
	Tracking string `json:"tracking"`
}

// OrderEvents publishes to orders-events through the outbox
// (outbox.AsSender provides it: a publish is a row in the transaction in
// its context); a test gives fxmoduletest.Publisher, which routes as the
// broker would.
type OrderEvents interface{ mq.Sender }

// Carrier books a parcel.
type Carrier interface {
	Book(ctx context.Context, o Order) (tracking string, err error)
}

// Shipping ships placed orders and announces them.
type Shipping struct {
	Events  OrderEvents
	Carrier Carrier
	Log     *slog.Logger
}

// errNoAddress is a problem for a person, not for a retry.
var errNoAddress = errors.New("order has no delivery address")

// Ship handles one order: an order without an address is parked; a carrier
// that fails is retried by the ladder; a booked order is announced as
// order.shipped before the delivery is acknowledged.
func (s *Shipping) Ship(ctx context.Context, d *mq.Delivery, o Order) error {
	if o.Address == "" {
		return middleware.Park(fmt.Errorf("order %s: %w", o.ID, errNoAddress))
	}
	tracking, err := s.Carrier.Book(ctx, o)
	if err != nil {
		return fmt.Errorf("book a parcel for order %s: %w", o.ID, err)
	}
	s.Log.InfoContext(ctx, "shipping.booked", "order", o.ID, "tracking", tracking, "attempt", d.Attempt())
	if err := recordShipment(ctx, o.ID, tracking); err != nil {
		return fmt.Errorf("record the shipment of order %s: %w", o.ID, err)
	}
	if err := typed.Publish(ctx, s.Events, "order.shipped", Shipped{OrderID: o.ID, Tracking: tracking}); err != nil {
		return fmt.Errorf("announce order %s shipped: %w", o.ID, err)
	}
	s.Log.InfoContext(ctx, "shipping.shipped", "order", o.ID)
	return nil
}

// Consumer is the fx consumer definition: middleware.Standard with the
// topology's policy around the typed handler, and the app's inbox
// (outbox.Module's, with its one schema) inside it, next to the handler:
// each attempt a transaction of its own, the shipment and order.shipped
// committed with the inbox's record, so an order is shipped once however
// often order.placed arrives.
func (s *Shipping) Consumer() fxmodule.Consumer {
	return fxmodule.Consumer{Queue: ShippingQueue, Handler: typed.Handler(s.Ship), Standard: true, Inbox: true}
}
