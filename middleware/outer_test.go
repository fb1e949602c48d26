package middleware

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/mqtest"
	"github.com/acemq/acemq-go/retry"
)

// seen is what a middleware wrapped outside Standard saw of one delivery.
type seen struct {
	calls   int
	err     error
	outcome mq.Outcome
}

// outside is a user's middleware (a metric, a log line) that records what
// next.Handle returned and the delivery's outcome at that moment.
func outside(s *seen) mq.Middleware {
	return func(next mq.Handler) mq.Handler {
		return mq.HandlerFunc(func(ctx context.Context, d *mq.Delivery) error {
			s.calls++
			err := next.Handle(ctx, d)
			s.err, s.outcome = err, d.Outcome()
			return err
		})
	}
}

// TestOuterMiddlewareSeesTheFate pins down what a middleware outside
// Standard observes for each fate: one call per delivery (in-process
// retries included), nil and d.Outcome() for anything the consumer
// carried out (a hop, a dead letter, a park), the Requeue error and
// OutcomeRequeue for a requeue. It never sees the chain's decision itself.
func TestOuterMiddlewareSeesTheFate(t *testing.T) {
	inProcess := retry.Waits(10*time.Millisecond, 20*time.Millisecond)    // 3 attempts, all in-process
	thenBroker := retry.Waits(10*time.Millisecond, time.Minute)           // in-process, then a rung
	brokerFirst := retry.Waits(time.Minute).With(retry.InProcessLimit(0)) // a rung at once
	failing := func(n int, final error) func(attempt int) error {         // fails the first n attempts
		return func(attempt int) error {
			if attempt <= n {
				return fmt.Errorf("attempt %d: %w", attempt, errBoom)
			}
			return final
		}
	}
	cases := []struct {
		name    string
		p       retry.Policy
		handle  func(attempt int) error
		refuse  string // a queue whose hop comes back unroutable
		calls   int    // handler calls
		err     func(error) bool
		outcome mq.Outcome
		hopTo   string // the last hop's queue ("" none)
	}{
		{name: "success", p: inProcess, handle: failing(0, nil), calls: 1, err: isNil, outcome: mq.OutcomeAck},
		{name: "in-process retry then success", p: inProcess, handle: failing(2, nil), calls: 3, err: isNil, outcome: mq.OutcomeAck},
		{name: "in-process retry then broker rung", p: thenBroker, handle: failing(9, nil), calls: 2, err: isNil, outcome: mq.OutcomeRetry, hopTo: "q.retry.1m"},
		{name: "broker rung", p: brokerFirst, handle: failing(9, nil), calls: 1, err: isNil, outcome: mq.OutcomeRetry, hopTo: "q.retry.1m"},
		{name: "exhausted", p: inProcess, handle: failing(9, nil), calls: 3, err: isNil, outcome: mq.OutcomeDeadLetter, hopTo: "q.dlq"},
		{name: "park", p: inProcess, handle: func(int) error { return Park(errBoom) }, calls: 1, err: isNil, outcome: mq.OutcomePark, hopTo: "q.parked"},
		{name: "reject", p: inProcess, handle: func(int) error { return Reject(errBoom) }, calls: 1, err: isNil, outcome: mq.OutcomeDeadLetter, hopTo: "q.dlq"},
		{name: "requeue", p: inProcess, handle: func(int) error { return mq.Requeue(errBoom) }, calls: 1, err: isRequeue, outcome: mq.OutcomeRequeue},
		{name: "missing rung", p: brokerFirst, handle: failing(9, nil), refuse: "q.retry.1m", calls: 1, err: isNil, outcome: mq.OutcomeDeadLetter, hopTo: "q.dlq"},
		{name: "failed set-aside", p: inProcess, handle: func(int) error { return Park(errBoom) }, refuse: "q.parked", calls: 1, err: isNil, outcome: mq.OutcomeRequeue, hopTo: "q"},
		{name: "panic then success", p: inProcess, handle: func(a int) error {
			if a == 1 {
				panic("kaboom")
			}
			return nil
		}, calls: 2, err: isNil, outcome: mq.OutcomeAck},
		{name: "panic every time", p: inProcess, handle: func(int) error { panic("kaboom") }, calls: 3, err: isNil, outcome: mq.OutcomeDeadLetter, hopTo: "q.dlq"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var s seen
			h := mq.HandlerFunc(func(_ context.Context, d *mq.Delivery) error { return tc.handle(d.Attempt()) })
			c := mqtest.New(t, "q", h, mq.WithMiddleware(outside(&s)), Standard(tc.p, WithoutDeclare()))
			if tc.refuse != "" {
				c.Refuse(tc.refuse, unroutable(tc.refuse))
			}
			r := c.Deliver(mq.Message{MessageId: "m1"})
			if s.calls != 1 {
				t.Errorf("outer middleware called %d times for one delivery, want 1", s.calls)
			}
			if r.Attempts != tc.calls {
				t.Errorf("handler called %d times, want %d (%s)", r.Attempts, tc.calls, r)
			}
			var dec *mq.Decision
			if errors.As(s.err, &dec) {
				t.Errorf("outer middleware saw the chain's decision %v, want what the consumer made of it", s.err)
			}
			if !tc.err(s.err) {
				t.Errorf("outer middleware saw err %v", s.err)
			}
			if s.outcome != tc.outcome {
				t.Errorf("outer middleware saw d.Outcome() %q, want %q", s.outcome, tc.outcome)
			}
			hop := ""
			if len(r.Hops) > 0 {
				hop = r.Hops[len(r.Hops)-1].Queue
			}
			if hop != tc.hopTo {
				t.Errorf("last hop to %q, want %q (%s)", hop, tc.hopTo, r)
			}
		})
	}
}

func isNil(err error) bool     { return err == nil }
func isRequeue(err error) bool { return errors.Is(err, mq.ErrRequeue) }

// TestMiddlewareBetweenLadderAndParking: a middleware a user puts between
// the ladder and Parking sees Parking's set-aside carried out (nil, the
// park outcome), and the ladder outside it does not retry it.
func TestMiddlewareBetweenLadderAndParking(t *testing.T) {
	var s seen
	h := mq.HandlerFunc(func(context.Context, *mq.Delivery) error { return Park(errBoom) })
	p := retry.Waits(10 * time.Millisecond)
	c := mqtest.New(t, "q", h, mq.WithMiddleware(RetryLadder(p), outside(&s), Parking()))
	r := c.Deliver(mq.Message{MessageId: "m1"})
	if s.calls != 1 || s.err != nil || s.outcome != mq.OutcomePark {
		t.Errorf("middleware between saw %d call(s), err %v, outcome %q; want 1, nil, park", s.calls, s.err, s.outcome)
	}
	if r.Outcome != mq.OutcomePark || r.Attempts != 1 || len(r.Hops) != 1 || r.Hops[0].Queue != "q.parked" {
		t.Errorf("result %s, want parked after 1 attempt", r)
	}
}
