package middleware

import (
	"context"
	"errors"

	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/topology"
)

// Verdict is what Parking does with a handler's error.
type Verdict int

const (
	// Pass leaves the error to the middleware outside Parking (the retry
	// ladder).
	Pass Verdict = iota
	// ToParked sends the message to <queue>.parked: a person must look.
	ToParked
	// ToDeadLetter sends the message straight to <queue>.dlq (reason
	// "rejected"): the failure is permanent.
	ToDeadLetter
)

// Classifier decides what Parking does with an error the handler did not
// mark itself (a validation error type, say).
type Classifier func(error) Verdict

// Parking sets aside the messages no retry will help: an error marked with
// Park, or classified ToParked, goes to <queue>.parked (reason "parked"); an
// error marked with Reject, or classified ToDeadLetter, goes to
// <queue>.dlq (reason "rejected"). Both carry the contract's failure
// headers, after exactly one call of the handler. Any other error passes
// through. Classifiers run in order; the first verdict other than Pass
// wins.
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
	switch p.verdict(err) {
	case ToParked:
		return &mq.Decision{Outcome: mq.OutcomePark, Queue: topology.ParkedQueue(d.Queue()), Reason: mq.ReasonParked, Cause: unmark(err)}
	case ToDeadLetter:
		return &mq.Decision{Outcome: mq.OutcomeDeadLetter, Queue: topology.DeadLetterQueue(d.Queue()), Reason: mq.ReasonRejected, Cause: unmark(err)}
	}
	return err
}

// unmark strips a Park or Reject mark, so x-acemq-error carries the
// handler's own error text: the reason header already says which it was.
func unmark(err error) error {
	var pe *parkError
	var re *rejectError
	switch {
	case errors.As(err, &pe) && pe == err:
		return pe.err
	case errors.As(err, &re) && re == err:
		return re.err
	}
	return err
}

func (p *parking) verdict(err error) Verdict {
	switch {
	case IsPark(err):
		return ToParked
	case IsReject(err):
		return ToDeadLetter
	}
	for _, c := range p.classify {
		if c == nil {
			continue
		}
		if v := c(err); v != Pass {
			return v
		}
	}
	return Pass
}
