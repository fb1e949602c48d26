package middleware

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/acemq/acemq-go/mq"
)

// Logging writes one record per delivery once the chain inside it is done,
// as acemq.message.settled with the queue, message id, routing key (the
// original one, whatever hops the message made), attempt, outcome,
// duration and (for anything but an ack) the cause: at debug for an ack, at
// info for a retry, at warn for a park, a dead letter or a requeue. An
// error that escapes it is not logged here: the consumer runtime, which
// rejects the message, logs it once. The record goes to the delivery's
// logger (Delivery.Logger: the consumer's, from mq.Config.Logger), which
// carries the queue.
func Logging() mq.Middleware {
	return func(next mq.Handler) mq.Handler { return &logging{next: next} }
}

type logging struct {
	next mq.Handler
}

func (g *logging) Handle(ctx context.Context, d *mq.Delivery) error {
	start := time.Now()
	err := g.next.Handle(ctx, d)
	l := d.Logger()
	level, outcome := slog.LevelDebug, d.Outcome()
	switch {
	case err != nil && errors.Is(err, mq.ErrRequeue):
		level, outcome = slog.LevelWarn, mq.OutcomeRequeue
	case err != nil:
		return err
	case outcome == mq.OutcomeRetry:
		level = slog.LevelInfo
	case outcome == mq.OutcomePark || outcome == mq.OutcomeDeadLetter:
		level = slog.LevelWarn
	case outcome == "":
		outcome = mq.OutcomeAck
	}
	if !l.Enabled(ctx, level) {
		return err
	}
	attrs := []slog.Attr{
		slog.String("message_id", d.MessageId),
		slog.String("routing_key", d.RoutingKey),
		slog.Int("attempt", d.Attempt()),
		slog.String("outcome", string(outcome)),
		slog.Duration("took", time.Since(start)),
	}
	cause := d.Cause()
	if err != nil {
		cause = err
	}
	if cause != nil {
		attrs = append(attrs, slog.String("cause", cause.Error()))
	}
	l.LogAttrs(ctx, level, "acemq.message.settled", attrs...)
	return err
}
