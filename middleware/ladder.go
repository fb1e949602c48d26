package middleware

import (
	"context"
	"errors"
	"fmt"

	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/retry"
	"github.com/acemq/acemq-go/topology"
)

// RetryLadder runs p against the handler's errors. After failed attempt k:
//
//   - a wait of at most p's in-process limit is waited by the consumer
//     (the delivery stays unacknowledged and its worker goes on with the
//     rest of the queue), which then calls the ladder again, as the next
//     attempt;
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
// The ladder decides; the consumer acts (mq.Decision). The original is
// acknowledged only after the hop's publish is confirmed
// and not returned. A rung that does not exist (the publish comes back
// unroutable) is logged and reported as acemq.retry.rung.missing and the
// message is set aside in <queue>.dlq (reason "rung-missing"). A hop the
// broker refuses (a full rung, a .dlq that cannot be written) is made
// again, never replaced by another attempt: the copy waits in the
// message's own queue, naming its target (x-acemq-pending-hop), and a
// restart does not forget it.
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

// declaredLadder is StandardDeclared's ladder: it runs the policy the
// Broker declared for its queue, which Broker.Consume gives it before the
// consumer subscribes (mq looks for its TakePolicy method).
type declaredLadder struct{ ladder }

// TakePolicy sets the policy the ladder runs.
func (l *declaredLadder) TakePolicy(p retry.Policy) { l.p = p }

// RetryPolicy is the policy the ladder runs (mq reads it): DeclareOnStart declares
// the rungs of this policy.
func (l *ladder) RetryPolicy() retry.Policy { return l.p }

// Subscribe refuses to start a consumer whose policy is invalid.
func (l *ladder) Subscribe(_ context.Context, s *mq.Subscription) error {
	if err := l.p.Validate(); err != nil {
		return fmt.Errorf("RetryLadder: %w", err)
	}
	return nil
}

// Handle calls the handler once and decides what its error means: an
// in-process wait (the consumer waits, then calls the ladder again as the
// next attempt), a hop to a broker rung, or .dlq when every attempt is
// used. The consumer carries the decision out.
func (l *ladder) Handle(ctx context.Context, d *mq.Delivery) error {
	err := l.next.Handle(ctx, d)
	if err == nil || IsPark(err) || IsReject(err) || errors.Is(err, mq.ErrRequeue) {
		return err
	}
	if _, decided := errors.AsType[*mq.Decision](err); decided {
		return err // decided further in
	}
	if ctx.Err() != nil {
		// The channel is gone or the stop deadline passed: the broker
		// requeues the message; a hop now would only duplicate it.
		return mq.Requeue(err)
	}
	step := l.p.After(d.Attempt())
	switch {
	case step.Next > 0 && step.InProcess:
		// The consumer calls the ladder again after the wait: the
		// middleware outside it sees one call per delivery.
		return &mq.Decision{Outcome: mq.OutcomeRetry, Wait: step.Wait, Cause: err}
	case step.Next > 0:
		return &mq.Decision{Outcome: mq.OutcomeRetry, Queue: topology.Rung(d.Queue(), l.p, step.Wait).Name, Wait: step.Wait, Cause: err}
	default:
		return &mq.Decision{Outcome: mq.OutcomeDeadLetter, Queue: topology.DeadLetterQueue(d.Queue()), Reason: mq.ReasonExhausted, Cause: err}
	}
}
