package middleware

import (
	"context"

	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/topology"
)

// Classifier decides what Parking does with an error the handler did not
// mark itself (a validation error type, say): mq.OutcomePark sends the
// message to <queue>.parked, mq.OutcomeDeadLetter to <queue>.dlq (reason
// "rejected"), and "" (or any other outcome) leaves the error to the
// middleware outside Parking (the retry ladder).
type Classifier func(error) mq.Outcome

// Parking sets aside the messages no retry will help: an error marked with
// Park, or classified mq.OutcomePark, goes to <queue>.parked (reason
// "parked"); an error marked with Reject, or classified
// mq.OutcomeDeadLetter, goes to <queue>.dlq (reason "rejected"). Both
// carry the contract's failure headers, after exactly one call of the
// handler: Parking decides (an mq.Decision), the consumer hops. Any other
// error passes through, and so does a decision made further in.
// Classifiers run in order; the first that says park or dead-letter wins.
func Parking(classify ...Classifier) mq.Middleware {
	return func(next mq.Handler) mq.Handler { return &parking{next: next, classify: classify} }
}

type parking struct {
	next     mq.Handler
	classify []Classifier
}

func (p *parking) Handle(ctx context.Context, d *mq.Delivery) error {
	err := p.next.Handle(ctx, d)
	if err == nil {
		return nil
	}
	switch p.classify1(err) {
	case mq.OutcomePark:
		return &mq.Decision{Outcome: mq.OutcomePark, Queue: topology.ParkedQueue(d.Queue()), Reason: mq.ReasonParked, Cause: unmark(err)}
	case mq.OutcomeDeadLetter:
		return &mq.Decision{Outcome: mq.OutcomeDeadLetter, Queue: topology.DeadLetterQueue(d.Queue()), Reason: mq.ReasonRejected, Cause: unmark(err)}
	}
	return err
}

// unmark strips a Park or Reject mark, so x-acemq-error carries the
// handler's own error text: the reason header already says which it was.
func unmark(err error) error {
	switch e := err.(type) {
	case *parkError:
		return e.err
	case *rejectError:
		return e.err
	}
	return err
}

// classify1 is what becomes of err: park, dead-letter, or "" (pass).
func (p *parking) classify1(err error) mq.Outcome {
	switch {
	case IsPark(err):
		return mq.OutcomePark
	case IsReject(err):
		return mq.OutcomeDeadLetter
	}
	if _, decided := err.(*mq.Decision); decided {
		return ""
	}
	for _, c := range p.classify {
		if c == nil {
			continue
		}
		if o := c(err); o == mq.OutcomePark || o == mq.OutcomeDeadLetter {
			return o
		}
	}
	return ""
}
