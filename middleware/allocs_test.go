package middleware

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/mqtest"
	"github.com/acemq/acemq-go/retry"
)

// The Standard stack allocates nothing of its own for a delivery whose
// handler succeeds (issue 14): the Delivery is the runtime's one
// allocation, and whatever a middleware added to the chain would be paid
// on every message. With a timeout, context.WithTimeout's allocations are
// the price of the option and are left out here.
func TestStandardChainAllocatesNothingPerDelivery(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own")
	}
	info := slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelInfo}))
	h := mqtest.Chain(nopHandler, nil, standardStack(retry.Exponential(6, 10*time.Second), nil)...)
	d := mqtest.NewDelivery("orders", sample(amqp.Table{"custom": "v", mq.HeaderAttempt: int32(1)}), mqtest.Logger(info))
	ctx := context.Background()
	if n := testing.AllocsPerRun(1000, func() {
		if err := h.Handle(ctx, d); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("%v allocations per delivery in the standard chain, want 0", n)
	}
}
