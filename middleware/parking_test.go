package middleware

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/mqtest"
	"github.com/acemq/acemq-go/retry"
)

func TestParkAndReject(t *testing.T) {
	cases := []struct {
		name   string
		err    error
		queue  string
		kind   mq.Outcome
		reason mq.Reason
		out    mq.Outcome
		// text is x-acemq-error and cause the recorded cause: the
		// handler's own error, without the Park/Reject mark (the reason
		// header says which it was).
		text  string
		cause error
	}{
		{"park", Park(errBoom), "orders.parked", mq.OutcomePark, mq.ReasonParked, mq.OutcomePark, "boom", errBoom},
		{"park wrapped", fmt.Errorf("ctx: %w", Park(errBoom)), "orders.parked", mq.OutcomePark, mq.ReasonParked, mq.OutcomePark, "ctx: park: boom", nil},
		{"reject", Reject(errBoom), "orders.dlq", mq.OutcomeDeadLetter, mq.ReasonRejected, mq.OutcomeDeadLetter, "boom", errBoom},
		{"park nil", Park(nil), "orders.parked", mq.OutcomePark, mq.ReasonParked, mq.OutcomePark, "", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := newWorld()
			raw := sample(amqp.Table{"custom": "v"})
			d := w.delivery("orders", raw)
			s := &script{results: []error{c.err}}
			// A generous policy around it: a parked or rejected message is
			// still handled exactly once.
			h := mqtest.Chain(s, nil, RetryLadder(retry.Fixed(5, time.Millisecond)), Parking())
			if err := h.Handle(context.Background(), d); err != nil {
				t.Fatalf("Handle = %v", err)
			}
			if s.calls() != 1 {
				t.Errorf("%d calls, want 1", s.calls())
			}
			if len(w.hops) != 1 || w.hops[0].queue != c.queue || w.hops[0].kind != c.kind {
				t.Fatalf("hops %+v, want one to %s", w.hops, c.queue)
			}
			hd := w.hops[0].m.Headers
			if hd[mq.HeaderReason] != string(c.reason) || hd[mq.HeaderSourceQueue] != "orders" || hd[mq.HeaderAttempt] != int32(2) {
				t.Errorf("headers %v", hd)
			}
			if text, _ := hd[mq.HeaderError].(string); text != c.text {
				t.Errorf("%s = %q, want %q", mq.HeaderError, text, c.text)
			}
			if _, ok := hd[mq.HeaderFailedAt].(time.Time); !ok {
				t.Errorf("no %s", mq.HeaderFailedAt)
			}
			sameProperties(t, raw, w.hops[0].m)
			want := c.cause
			if c.name == "park wrapped" {
				want = c.err
			}
			if d.Outcome() != c.out || d.Cause() != want {
				t.Errorf("outcome %q cause %v", d.Outcome(), d.Cause())
			}
		})
	}
}

func TestParkAfterInProcessRetry(t *testing.T) {
	w := newWorld()
	s := &script{results: []error{errBoom, Park(errBoom)}}
	h := mqtest.Chain(s, nil, RetryLadder(retry.Fixed(5, time.Millisecond)), Parking())
	if err := h.Handle(context.Background(), w.delivery("q", sample(nil))); err != nil {
		t.Fatal(err)
	}
	if s.calls() != 2 || len(w.hops) != 1 || w.hops[0].queue != "q.parked" || w.hops[0].m.Headers[mq.HeaderAttempt] != int32(3) {
		t.Errorf("%d calls, hops %+v", s.calls(), w.hops)
	}
}

type validationError struct{ field string }

func (e *validationError) Error() string { return "invalid " + e.field }

var errPermanent = errors.New("permanent")

func TestClassifiers(t *testing.T) {
	byType := func(err error) mq.Outcome {
		var v *validationError
		if errors.As(err, &v) {
			return mq.OutcomePark
		}
		return ""
	}
	bySentinel := func(err error) mq.Outcome {
		if errors.Is(err, errPermanent) {
			return mq.OutcomeDeadLetter
		}
		return ""
	}
	everything := func(error) mq.Outcome { return mq.OutcomeDeadLetter }
	cases := []struct {
		name     string
		classify []Classifier
		err      error
		queue    string // "" when the error passes through
		reason   mq.Reason
	}{
		{"by type", []Classifier{nil, byType, bySentinel}, fmt.Errorf("wrapped: %w", &validationError{"sku"}), "q.parked", mq.ReasonParked},
		{"by sentinel", []Classifier{byType, bySentinel}, errPermanent, "q.dlq", mq.ReasonRejected},
		{"none matches", []Classifier{byType, bySentinel}, errBoom, "", ""},
		{"first verdict wins", []Classifier{byType, everything}, &validationError{"sku"}, "q.parked", mq.ReasonParked},
		{"order matters", []Classifier{everything, byType}, &validationError{"sku"}, "q.dlq", mq.ReasonRejected},
		{"marks win over classifiers", []Classifier{everything}, Park(errBoom), "q.parked", mq.ReasonParked},
		{"no classifiers", nil, errBoom, "", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := newWorld()
			s := &script{results: []error{c.err}}
			err := mqtest.Chain(s, nil, Parking(c.classify...)).Handle(context.Background(), w.delivery("q", sample(nil)))
			if c.queue == "" {
				if err != c.err || len(w.hops) != 0 {
					t.Errorf("Handle = %v, hops %+v: want the error passed through", err, w.hops)
				}
				return
			}
			if err != nil || len(w.hops) != 1 || w.hops[0].queue != c.queue || w.hops[0].m.Headers[mq.HeaderReason] != string(c.reason) {
				t.Errorf("Handle = %v, hops %+v: want %s (%s)", err, w.hops, c.queue, c.reason)
			}
		})
	}
}

func TestParkRejectErrors(t *testing.T) {
	if !IsPark(fmt.Errorf("x: %w", Park(errBoom))) || IsReject(Park(errBoom)) || IsPark(errBoom) {
		t.Error("IsPark")
	}
	if !IsReject(fmt.Errorf("x: %w", Reject(errBoom))) || IsPark(Reject(errBoom)) || IsReject(errBoom) {
		t.Error("IsReject")
	}
	if !errors.Is(Park(errBoom), errBoom) || !errors.Is(Reject(errBoom), errBoom) {
		t.Error("Park and Reject must unwrap to their error")
	}
	if !strings.Contains(Park(errBoom).Error(), "boom") || !strings.Contains(Reject(nil).Error(), "<nil>") {
		t.Error("error text")
	}
}
