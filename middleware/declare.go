package middleware

import (
	"context"
	"fmt"

	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/topology"
)

// DeclareOnStart declares, before every (re)subscribe, the failure half of
// the consumer's queue (docs/contract.md, "Who declares what"): acemq.dlx, <queue>.dlq,
// <queue>.parked and their bindings, and for a retry policy with broker
// rungs, acemq.retry, the rungs and the home binding. The policy is the one
// the consumer's retry ladder runs (mq.Runner.RetryPolicy of the
// subscription's Runner; none: one attempt), never a
// second list. It never declares the source queue itself. Leaving it out is
// declare=false: for a login without configure permission, or a tool
// reading a queue it does not own.
func DeclareOnStart() mq.Middleware {
	return func(next mq.Handler) mq.Handler { return &declarer{next: next} }
}

type declarer struct{ next mq.Handler }

func (x *declarer) Handle(ctx context.Context, d *mq.Delivery) error { return x.next.Handle(ctx, d) }

// Subscribe first checks, passively, that the queue exists: for a queue
// that does not (misspelled, or deleted), it declares nothing and fails with
// an error wrapping mq.ErrNotFound that names it, so a consumer that cannot
// start leaves no <queue>.dlq or <queue>.parked behind. Then it declares
// topology.ForConsumer(queue, policy). On the first
// subscribe a refusal fails the consumer's start, with the refusal named. On
// a resubscribe after a reconnect the failure half was declared before, so a
// failure (a cluster node holding .dlq is down, say) is logged as
// acemq.declare.failed and consumption resumes: a message that then cannot
// be set aside is requeued, never lost.
func (x *declarer) Subscribe(ctx context.Context, s *mq.Subscription) error {
	exists, err := s.Broker.QueueExists(ctx, s.Queue)
	if err == nil && !exists {
		return fmt.Errorf("DeclareOnStart: queue %q does not exist (reply 404 NOT_FOUND to a passive declare), so nothing is declared for it: %w", s.Queue, mq.ErrNotFound)
	}
	if err == nil {
		p, _ := s.Runner.RetryPolicy() // none: the zero policy, one attempt
		err = s.Broker.Declare(ctx, topology.ForConsumer(s.Queue, p))
	}
	if err != nil && s.Resubscribe && ctx.Err() == nil {
		s.Logger.WarnContext(ctx, "acemq.declare.failed", "error", err)
		return nil
	}
	if err != nil {
		return fmt.Errorf("DeclareOnStart: %w", err)
	}
	return nil
}
