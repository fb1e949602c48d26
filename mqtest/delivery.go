package mqtest

import (
	"context"
	"log/slog"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/internal/seam"
	"github.com/acemq/acemq-go/mq"
)

type seamDelivery = seam.Delivery[mq.Message, mq.Event, mq.HopKind]

var (
	newDelivery = seam.Get[func(string, amqp.Delivery, seamDelivery) *mq.Delivery]()
	attempts    = seam.Get[func(mq.Handler, []mq.AttemptHook) mq.Handler]()
	buildChain  = seam.Get[func(mq.Handler, []mq.AttemptHook, []mq.ConsumerOption) (mq.Handler, mq.PolicyHolder, error)]()
)

// DeliveryOption adjusts a delivery made by NewDelivery.
type DeliveryOption func(*seamDelivery)

// Forward makes the delivery's Forward call fn instead of publishing: fn
// receives the target queue, the hop kind and the message exactly as it
// would be published.
func Forward(fn func(ctx context.Context, queue string, kind mq.HopKind, m mq.Message) error) DeliveryOption {
	return func(s *seamDelivery) { s.Forward = fn }
}

// Logger sets the delivery's logger (default slog.Default()).
func Logger(l *slog.Logger) DeliveryOption {
	return func(s *seamDelivery) { s.Log = l }
}

// Events makes the delivery's Emit call fn.
func Events(fn func(ctx context.Context, e mq.Event)) DeliveryOption {
	return func(s *seamDelivery) { s.Emit = fn }
}

// NewDelivery builds a Delivery outside any consumer, for testing a
// middleware or a hook: its attempt is raw's x-acemq-attempt (a real
// consumer also counts a quorum queue's returns past the first two, and the
// attempts of a message it returned itself). Without Forward, its Forward fails with mq.ErrClosed.
func NewDelivery(queue string, raw amqp.Delivery, opts ...DeliveryOption) *mq.Delivery {
	var s seamDelivery
	for _, o := range opts {
		if o != nil {
			o(&s)
		}
	}
	return newDelivery(queue, raw, s)
}

// Attempts wraps h as a consumer wraps the application's handler: every
// call after the first is the next attempt of the delivery (d.Attempt()
// counts up), and hooks see each one. Put it innermost:
// mq.Chain(mqtest.Attempts(h), mws...).
func Attempts(h mq.Handler, hooks ...mq.AttemptHook) mq.Handler {
	return attempts(h, hooks)
}
