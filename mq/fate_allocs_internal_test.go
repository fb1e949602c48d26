package mq

import (
	"context"
	"errors"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
)

// A consumer's chain puts a carrier outside every middleware, and each
// looks for a Decision in the error passing up: that look must cost no
// allocation, or a failed delivery pays one per middleware.
func TestFailedDeliveryAllocationsDoNotGrowWithMiddleware(t *testing.T) {
	pass := func(next Handler) Handler {
		return HandlerFunc(func(ctx context.Context, d *Delivery) error { return next.Handle(ctx, d) })
	}
	failing := HandlerFunc(func(context.Context, *Delivery) error { return errFateAllocs })
	allocs := func(depth int) float64 {
		mws := make([]Middleware, depth)
		for i := range mws {
			mws[i] = pass
		}
		r := newRunner(failing, nil, mws)
		d := NewDelivery("rv-core.allocs", amqp.Delivery{}, nil)
		ctx := context.Background()
		return testing.AllocsPerRun(200, func() {
			if err := r.Deliver(ctx, d); !errors.Is(err, errFateAllocs) {
				t.Fatalf("Deliver: %v, want the handler's error", err)
			}
		})
	}
	if bare, deep := allocs(0), allocs(6); deep > bare {
		t.Errorf("a failed delivery: %v allocations with no middleware, %v with six: want no more", bare, deep)
	}
}

var errFateAllocs = errors.New("handler failed")
