package middleware

import (
	"context"
	"errors"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/retry"
	"github.com/acemq/acemq-go/topology"
)

// RetryLadder runs p against the handler's errors. After failed attempt k:
//
//   - a wait of at most p's in-process limit is waited here
//     (mq.Delivery.Wait: the delivery stays unacknowledged and its worker
//     goes on with the rest of the queue), then the handler is called again,
//     as the next attempt, inside the same middleware call;
//   - a longer wait republishes the message, x-acemq-attempt = k+1 and
//     x-acemq-source-queue added, to the broker rung <queue>.retry.<wait>,
//     which brings it back after the wait;
//   - when every attempt is used, the message goes to <queue>.dlq with the
//     failure headers (reason "exhausted").
//
// A wait cut short keeps the attempts used: when the consumer stops, the
// message is republished to its own queue with the next attempt before the
// original is acknowledged; when the channel is lost (nothing can be
// acknowledged), the consumer remembers the attempt for the redelivery,
// and a quorum queue's x-delivery-count counts it after a restart.
//
// The original is acknowledged only after the hop's publish is confirmed
// and not returned. A rung that does not exist (the publish comes back
// unroutable) is logged and reported as acemq.retry.rung.missing and the
// message is set aside in <queue>.dlq (reason "rung-missing"); a failed
// set-aside returns the original to its queue after a pause.
//
// Errors marked Park or Reject are never retried: they pass through for
// Parking. An mq.Requeue error passes through too. A panic inside the
// ladder (a classifier's, say) is a failed attempt like any other.
func RetryLadder(p retry.Policy) mq.Middleware {
	// A panic below the ladder is recovered (and logged) as Recover does,
	// and then it is an attempt's error like any other.
	return func(next mq.Handler) mq.Handler { return &ladder{next: &recoverer{next}, p: p} }
}

type ladder struct {
	next mq.Handler
	p    retry.Policy
}

// RetryPolicy makes the ladder an mq.PolicyHolder: DeclareOnStart declares
// the rungs of this policy.
func (l *ladder) RetryPolicy() retry.Policy { return l.p }

// Subscribe refuses to start a consumer whose policy is invalid.
func (l *ladder) Subscribe(_ context.Context, s *mq.Subscription) error {
	if err := l.p.Validate(); err != nil {
		return fmt.Errorf("RetryLadder: %w", err)
	}
	return nil
}

func (l *ladder) Handle(ctx context.Context, d *mq.Delivery) error {
	for {
		err := l.next.Handle(ctx, d)
		if err == nil || IsPark(err) || IsReject(err) || errors.Is(err, mq.ErrRequeue) {
			return err
		}
		if ctx.Err() != nil {
			// The channel is gone or the stop deadline passed: the broker
			// requeues the message; a hop now would only duplicate it.
			return mq.Requeue(err)
		}
		step := l.p.After(d.Attempt())
		switch step.Action {
		case retry.WaitInProcess:
			d.Logger().DebugContext(ctx, mq.EventRetry, "message_id", d.MessageId, "attempt", d.Attempt(),
				"kind", "in-process", "wait", step.Wait, "error", err)
			d.Emit(ctx, mq.Event{Name: mq.EventRetry, Kind: mq.KindInProcess, Attempt: d.Attempt(), Wait: step.Wait, Err: err})
			if werr := d.Wait(ctx, step.Wait); werr != nil {
				return l.cut(ctx, d, step, err)
			}
		case retry.WaitOnBroker:
			return l.toRung(ctx, d, step, err)
		default:
			return setAside(ctx, d, mq.ReasonExhausted, err)
		}
	}
}

// cut keeps the attempts of a delivery whose in-process wait was cut short.
// While its channel lives (the consumer is stopping), the message goes back
// to its own queue as a copy whose x-acemq-attempt is the next attempt,
// confirmed before the original is acknowledged. Otherwise it is returned
// as it is, and the consumer's memory or the broker's delivery count carry
// the attempt.
func (l *ladder) cut(ctx context.Context, d *mq.Delivery, step retry.Step, cause error) error {
	if ctx.Err() != nil {
		return mq.Requeue(cause)
	}
	ferr := d.Forward(ctx, d.Queue(), mq.HopRetry, amqp.Table{
		mq.HeaderAttempt:     mq.AttemptValue(step.Next),
		mq.HeaderSourceQueue: d.Queue(),
	})
	if ferr != nil {
		return mq.Requeue(fmt.Errorf("keep attempt %d through %s: %w", step.Next, d.Queue(), ferr))
	}
	d.Emit(ctx, mq.Event{Name: mq.EventRetry, Kind: mq.KindCarried, Target: d.Queue(), Attempt: d.Attempt(), Err: cause})
	d.SetOutcome(mq.OutcomeRetry, cause)
	return nil
}

func (l *ladder) toRung(ctx context.Context, d *mq.Delivery, step retry.Step, cause error) error {
	rung := topology.RungQueue(d.Queue(), step.Wait)
	ferr := d.Forward(ctx, rung, mq.HopRetry, amqp.Table{
		mq.HeaderAttempt:     mq.AttemptValue(step.Next),
		mq.HeaderSourceQueue: d.Queue(),
	})
	switch {
	case ferr == nil:
		d.Emit(ctx, mq.Event{Name: mq.EventRetry, Kind: mq.KindBroker, Target: rung, Attempt: d.Attempt(), Wait: step.Wait, Err: cause})
		d.SetOutcome(mq.OutcomeRetry, cause)
		return nil
	case errors.Is(ferr, mq.ErrUnroutable):
		d.Logger().WarnContext(ctx, mq.EventRungMissing, "message_id", d.MessageId, "rung", rung,
			"attempt", d.Attempt(), "error", cause)
		d.Emit(ctx, mq.Event{Name: mq.EventRungMissing, Target: rung, Attempt: d.Attempt(), Err: cause})
		return setAside(ctx, d, mq.ReasonRungMissing, cause)
	default:
		return mq.Requeue(fmt.Errorf("retry via %s: %w", rung, ferr))
	}
}
