package mq

import (
	"context"
	"log/slog"

	amqp "github.com/rabbitmq/amqp091-go"
)

// TestOption adjusts a delivery made by NewTestDelivery.
type TestOption func(*Delivery)

// TestForward makes the delivery's Forward call fn instead of publishing:
// fn receives the target queue, the hop kind and the message exactly as it
// would be published.
func TestForward(fn func(ctx context.Context, queue string, kind HopKind, m Message) error) TestOption {
	return func(d *Delivery) { d.forward = fn }
}

// TestLogger sets the delivery's logger.
func TestLogger(l *slog.Logger) TestOption {
	return func(d *Delivery) { d.log = l }
}

// TestEvents makes the delivery's Emit call fn.
func TestEvents(fn func(ctx context.Context, e Event)) TestOption {
	return func(d *Delivery) { d.emit = fn }
}

// NewTestDelivery builds a Delivery outside any consumer, for testing
// middleware and hooks without a broker: its attempt is read from raw's
// headers as a consumer would, and Handle calls through Chain count
// attempts the same way when the handler is wrapped with TestAttempts.
// Without TestForward, Forward fails with ErrClosed.
func NewTestDelivery(queue string, raw amqp.Delivery, opts ...TestOption) *Delivery {
	raw.Acknowledger = nil
	d := &Delivery{envelope: envelope(raw), queue: queue, attempt: AttemptOf(raw.Headers)}
	for _, o := range opts {
		o(d)
	}
	return d
}

// TestAttempts wraps h the way a consumer wraps the application's handler:
// every call after the first is the next attempt of the delivery, and the
// given hooks see each one.
func TestAttempts(h Handler, hooks ...AttemptHook) Handler {
	return &attemptHandler{next: h, hooks: hooks}
}
