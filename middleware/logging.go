package middleware

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/acemq/acemq-go/mq"
)

// Logging writes one record per delivery once its fate is carried out,
// as acemq.message.settled with the queue, message id, routing key (the
// original one, whatever hops the message made), attempt, outcome,
// duration and (for anything but an ack) the cause: at debug for an ack, at
// info for a retry, at warn for a park, a dead letter or a requeue. A
// rejected delivery is not logged here: the consumer runtime, which
// rejects the message, logs it once. A nil logger means the consumer's.
//
// The handler it returns is an mq.Observer: the consumer (mq.Runner) tells
// it each delivery's fate once carried out.
func Logging(l *slog.Logger) mq.Middleware {
	return func(next mq.Handler) mq.Handler { return &logging{next: next, l: l} }
}

type logging struct {
	next mq.Handler
	l    *slog.Logger
}

// Handle passes the delivery on: the record is written once its fate is
// known (Observe).
func (g *logging) Handle(ctx context.Context, d *mq.Delivery) error { return g.next.Handle(ctx, d) }

// Observe writes the record, once the consumer has carried out the
// delivery's fate: err is what it is settled with.
func (g *logging) Observe(ctx context.Context, d *mq.Delivery, err error, took time.Duration) {
	l := g.l
	if l == nil {
		l = d.Logger()
	}
	level, outcome := slog.LevelDebug, d.Outcome()
	switch {
	case err != nil && errors.Is(err, mq.ErrRequeue):
		level, outcome = slog.LevelWarn, mq.OutcomeRequeue
	case err != nil:
		return
	case outcome == mq.OutcomeRetry:
		level = slog.LevelInfo
	case outcome == mq.OutcomePark || outcome == mq.OutcomeDeadLetter:
		level = slog.LevelWarn
	case outcome == "":
		outcome = mq.OutcomeAck
	}
	if !l.Enabled(ctx, level) {
		return
	}
	attrs := []slog.Attr{
		slog.String("message_id", d.MessageId),
		slog.String("routing_key", d.RoutingKey),
		slog.Int("attempt", d.Attempt()),
		slog.String("outcome", string(outcome)),
		slog.Duration("took", took),
	}
	if g.l != nil {
		attrs = append(attrs, slog.String("queue", d.Queue()))
	}
	cause := d.Cause()
	if err != nil {
		cause = err
	}
	if cause != nil {
		attrs = append(attrs, slog.String("cause", cause.Error()))
	}
	l.LogAttrs(ctx, level, "acemq.message.settled", attrs...)
}
