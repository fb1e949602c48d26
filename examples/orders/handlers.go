package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"go.uber.org/fx"

	"github.com/acemq/acemq-go/fxmodule"
	"github.com/acemq/acemq-go/middleware"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/typed"
)

// Order is the demo's event body.
type Order struct {
	ID    string   `json:"id"`
	Items []string `json:"items"`
	// Story says how the shipping handler will treat it, so the demo shows
	// every path of the ladder.
	Story string `json:"story"`
}

var orders = []Order{
	{ID: "A-100", Items: []string{"kettle"}, Story: "ships at once"},
	{ID: "A-101", Items: []string{"teapot"}, Story: "stock service times out once: one in-process retry"},
	{ID: "A-102", Items: []string{"mug", "saucer"}, Story: "warehouse busy three times: two in-process retries, then a broker rung"},
	{ID: "A-103", Items: nil, Story: "has no items: parked for a person"},
	{ID: "A-104", Items: []string{"anvil"}, Story: "carrier keeps refusing it: every attempt used, dead-lettered"},
	{ID: "A-105", Items: []string{"spoon"}, Story: "ships at once"},
}

// failuresBefore is how often shipping fails an order before it succeeds
// (-1: never succeeds).
var failuresBefore = map[string]int{"A-101": 1, "A-102": 3, "A-104": -1}

type shipper struct {
	log   *slog.Logger
	mu    sync.Mutex
	tries map[string]int
}

func (s *shipper) Handle(ctx context.Context, d *mq.Delivery) error {
	var o Order
	if err := json.Unmarshal(d.Body, &o); err != nil {
		return middleware.Park(fmt.Errorf("not an order: %w", err))
	}
	if len(o.Items) == 0 {
		return middleware.Park(errors.New("order " + o.ID + " has no items"))
	}
	s.mu.Lock()
	s.tries[o.ID]++
	n := s.tries[o.ID]
	s.mu.Unlock()
	if f, ok := failuresBefore[o.ID]; ok && (f < 0 || n <= f) {
		s.log.Info("shipping failed", "order", o.ID, "attempt", d.Attempt())
		return fmt.Errorf("carrier unavailable for %s (attempt %d)", o.ID, d.Attempt())
	}
	s.log.Info("shipped", "order", o.ID, "attempt", d.Attempt())
	return nil
}

func shippingConsumer(log *slog.Logger) fxmodule.Consumer {
	return fxmodule.Consumer{
		Queue:   shipping,
		Handler: &shipper{log: log.With("consumer", "shipping"), tries: map[string]int{}},
		// The retry policy is the one the topology declares for the queue.
		Standard: true,
		Options:  []mq.ConsumerOption{mq.WithConcurrency(4)},
	}
}

func billingConsumer(log *slog.Logger) fxmodule.Consumer {
	l := log.With("consumer", "billing")
	return fxmodule.Consumer{
		Queue: billing,
		// typed.Handler decodes the JSON; a body that does not decode goes
		// to billing.orders.dlq (reason rejected), never retried.
		Handler: typed.Handler(func(ctx context.Context, d *mq.Delivery, o Order) error {
			l.Info("billed", "order", o.ID)
			return nil
		}),
		Standard: true,
	}
}

// publishOrders publishes the demo's orders once the app has started.
func publishOrders(log *slog.Logger, progress *tracker) func(fx.Lifecycle, *mq.Broker) {
	return func(lc fx.Lifecycle, b *mq.Broker) {
		var p *mq.Publisher
		lc.Append(fx.Hook{OnStart: func(ctx context.Context) error {
			p = b.Publisher(exchange)
			for _, o := range orders {
				body, _ := json.Marshal(o)
				err := p.Publish(ctx, "order.placed", mq.Message{Body: body, ContentType: "application/json", CorrelationId: o.ID})
				if err != nil {
					return fmt.Errorf("publish order %s: %w", o.ID, err)
				}
				log.Info("published", "order", o.ID, "story", o.Story)
				time.Sleep(50 * time.Millisecond)
			}
			return nil
		}, OnStop: func(context.Context) error {
			if p != nil {
				p.Close()
			}
			return nil
		}})
	}
}
