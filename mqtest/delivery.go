package mqtest

import (
	"context"
	"log/slog"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/mq"
)

// DeliveryOption adjusts a delivery made by NewDelivery.
type DeliveryOption func(*runtime)

// OnHop makes the delivery's hops call fn instead of publishing: fn
// receives the target queue, the hop kind and the message exactly as it
// would be published, and its error is the hop's.
func OnHop(fn func(ctx context.Context, queue string, kind mq.Outcome, m mq.Message) error) DeliveryOption {
	return func(r *runtime) { r.hop = fn }
}

// Logger sets the delivery's logger, Delivery.Logger (default
// slog.Default()): what a consumer hands its deliveries from
// mq.Config.Logger, and the one way to give the fake a logger.
func Logger(l *slog.Logger) DeliveryOption {
	return func(r *runtime) { r.log = l }
}

// OnEvent makes the delivery's events call fn.
func OnEvent(fn func(ctx context.Context, e mq.Event)) DeliveryOption {
	return func(r *runtime) { r.emit = fn }
}

// OnWait makes the delivery's in-process waits call fn instead of
// sleeping (a fake clock): nil once waited, an error when cut short.
func OnWait(fn func(ctx context.Context, w time.Duration) error) DeliveryOption {
	return func(r *runtime) { r.wait = fn }
}

// NewDelivery builds a Delivery outside any consumer, for testing a
// middleware or a hook, whose decisions are carried out (by Chain, or
// mq.Runner) as its options say: hops go to OnHop (without it they fail
// with mq.ErrClosed), events to OnEvent, in-process waits sleep (or go to
// OnWait). Its attempt
// is raw's x-acemq-attempt (a real consumer also counts a quorum queue's
// returns past the first two, and the attempts of a message it returned
// itself).
func NewDelivery(queue string, raw amqp.Delivery, opts ...DeliveryOption) *mq.Delivery {
	r := &runtime{}
	for _, o := range opts {
		if o != nil {
			o(r)
		}
	}
	return mq.NewDelivery(queue, raw, r)
}

// runtime is the mq.Runtime of a test delivery: it does what its test
// says instead of talking to a broker.
type runtime struct {
	hop  func(ctx context.Context, queue string, kind mq.Outcome, m mq.Message) error
	emit func(ctx context.Context, e mq.Event)
	log  *slog.Logger
	wait func(ctx context.Context, w time.Duration) error // nil: sleep
}

var _ mq.Runtime = (*runtime)(nil)

func (r *runtime) Hop(ctx context.Context, queue string, kind mq.Outcome, m mq.Message) error {
	if r.hop == nil {
		return mq.ErrClosed
	}
	return r.hop(ctx, queue, kind, m)
}

func (r *runtime) Wait(ctx context.Context, _ *mq.Delivery, w time.Duration) error {
	if r.wait != nil {
		return r.wait(ctx, w)
	}
	t := time.NewTimer(w)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (r *runtime) Event(ctx context.Context, e mq.Event) {
	if r.emit != nil {
		r.emit(ctx, e)
	}
}

func (r *runtime) Logger() *slog.Logger {
	if r.log != nil {
		return r.log
	}
	return slog.Default()
}

// Chain is the handler a consumer runs for h inside mws (the first
// outermost), built as Broker.Consume builds it (mq.Runner): every call of
// h after the first is the next attempt of the delivery (d.Attempt()
// counts up), hooks see each one, and what the middleware decides is
// carried out through the delivery's runtime (NewDelivery's options): its
// in-process waits, its hops, its events. Handle returns the error the
// delivery is settled with, and d.Outcome() says what became of it.
func Chain(h mq.Handler, hooks []mq.AttemptHook, mws ...mq.Middleware) mq.Handler {
	r, err := mq.NewRunner(h, hooks, mq.WithMiddleware(mws...))
	if err != nil {
		panic("mqtest.Chain: " + err.Error())
	}
	return mq.HandlerFunc(r.Deliver)
}
