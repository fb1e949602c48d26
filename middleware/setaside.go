package middleware

import (
	"context"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/topology"
)

// setAside republishes d to its queue's .dlq or .parked with the contract's
// failure headers and returns nil once confirmed. When that publish fails,
// it logs and reports EventSetAsideFailed and returns mq.Requeue: the
// original goes back to its queue after a pause, never acknowledged (the
// consumer, seeing the event, returns it with basic.nack and a pause that
// grows with its returns: see mq.EventSetAsideFailed).
func setAside(ctx context.Context, d *mq.Delivery, reason mq.Reason, cause error) error {
	target, kind, outcome := topology.DeadLetterQueue(d.Queue()), mq.HopDeadLetter, mq.OutcomeDeadLetter
	if reason == mq.ReasonParked {
		target, kind, outcome = topology.ParkedQueue(d.Queue()), mq.HopPark, mq.OutcomePark
	}
	err := d.Forward(ctx, target, kind, amqp.Table{
		mq.HeaderAttempt:     mq.AttemptValue(d.Attempt() + 1),
		mq.HeaderSourceQueue: d.Queue(),
		mq.HeaderReason:      string(reason),
		mq.HeaderError:       mq.ErrorText(cause),
		mq.HeaderFailedAt:    time.Now().UTC().Truncate(time.Second),
	})
	if err != nil {
		d.Logger().ErrorContext(ctx, mq.EventSetAsideFailed, "message_id", d.MessageId, "target", target,
			"reason", string(reason), "cause", errText(cause), "error", err)
		d.Emit(ctx, mq.Event{Name: mq.EventSetAsideFailed, Target: target, Attempt: d.Attempt(), Err: err})
		return mq.Requeue(fmt.Errorf("set aside in %s: %w", target, err))
	}
	d.SetOutcome(outcome, cause)
	return nil
}
