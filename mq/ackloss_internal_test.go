package mq

import (
	"context"
	"errors"
	"fmt"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
)

// memoRuntime is hopRuntime as a consumer's session: hops it confirms
// are remembered in memo, as the session remembers them.
type memoRuntime struct {
	hopRuntime
	memo     attemptMemo
	refuseTo string // hops to this queue are refused
}

func (r *memoRuntime) Hop(ctx context.Context, queue string, kind Outcome, m Message) error {
	r.mu.Lock()
	r.refuse = queue == r.refuseTo
	r.mu.Unlock()
	return r.hopRuntime.Hop(ctx, queue, kind, m)
}

func (r *memoRuntime) drains() <-chan struct{}    { return nil }
func (r *memoRuntime) server() string             { return "" }
func (r *memoRuntime) login() string              { return "" }
func (r *memoRuntime) cutShort() bool             { return false }
func (r *memoRuntime) keepsOrder() bool           { return false }
func (r *memoRuntime) hopped(d *Delivery, at int) { r.memo.rememberHop(d, at) }

// deciding stands for a middleware that decides dec on every failure.
func deciding(dec Decision, calls *int) Middleware {
	return func(next Handler) Handler {
		return HandlerFunc(func(ctx context.Context, d *Delivery) error {
			*calls++
			if err := next.Handle(ctx, d); err != nil {
				dc := dec
				dc.Cause = err
				return &dc
			}
			return nil
		})
	}
}

// A hop confirmed and its original's ack lost with the connection: the
// broker redelivers the original, and the consumer acknowledges it with
// the fate it carried out, through the middleware outside the one that
// decided, without calling that one or the handler again. A redelivery of
// the id while the original's channel is open, or after it was closed
// cleanly, is another message; so is a fresh one.
func TestHopConfirmedIsNotUndoneByALostAck(t *testing.T) {
	cases := []struct {
		name string
		dec  Decision
		want Outcome
	}{
		{"dlq", Decision{Outcome: OutcomeDeadLetter, Queue: "q.dlq", Reason: ReasonExhausted}, OutcomeDeadLetter},
		{"parked", Decision{Outcome: OutcomePark, Queue: "q.parked", Reason: ReasonParked}, OutcomePark},
		{"rung", Decision{Outcome: OutcomeRetry, Queue: "q.retry.1s"}, OutcomeRetry},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var outer, decider, handler int
			var outcomes []Outcome
			mws := []Middleware{
				recordingOuter(&outer, &outcomes),
				deciding(c.dec, &decider),
			}
			h := HandlerFunc(func(context.Context, *Delivery) error { handler++; return errors.New("fails") })
			r := newRunner(h, nil, mws)
			rt := &memoRuntime{}
			deliver := func(raw amqp.Delivery, l *lane) (*Delivery, error) {
				a, aside := rt.memo.recall(raw)
				d := NewDelivery("q", raw, rt)
				d.attempt, d.aside, d.lane = a, aside, l
				return d, r.Deliver(context.Background(), d)
			}
			original := amqp.Delivery{MessageId: "m", Body: []byte("m")}
			redelivered := original
			redelivered.Redelivered = true

			// The hop is confirmed on lane l; its channel is then lost.
			l := &lane{}
			if d, err := deliver(original, l); err != nil || d.Outcome() != c.want {
				t.Fatalf("first delivery: settled with %v (%q), want nil (%q)", err, d.Outcome(), c.want)
			}
			l.closed(false)
			d, err := deliver(redelivered, &lane{})
			if err != nil || d.Outcome() != c.want || d.Attempt() != 1 {
				t.Fatalf("redelivery after the ack was lost: settled with %v (%q, attempt %d), want nil (%q, attempt 1)", err, d.Outcome(), d.Attempt(), c.want)
			}
			if handler != 1 || decider != 1 || outer != 2 || len(rt.hops) != 1 {
				t.Fatalf("the handler ran %d times (want 1), the deciding middleware %d (want 1), the outer %d (want 2); %d hops (want 1)",
					handler, decider, outer, len(rt.hops))
			}
			if fmt.Sprint(outcomes) != fmt.Sprint([]Outcome{c.want, c.want}) {
				t.Fatalf("the outer middleware read %v, want %v twice", outcomes, c.want)
			}
			// The redelivery's own ack may be lost too: it is remembered.
			if rt.memo.size.Load() != 1 {
				t.Fatalf("after the redelivery the memo holds %d entries, want 1 (its own ack may be lost)", rt.memo.size.Load())
			}

			// Open, or closed cleanly: the broker holds or took the ack,
			// so a redelivery of the id is another message.
			for _, end := range []string{"open", "closed"} {
				l := &lane{}
				if _, err := deliver(original, l); err != nil {
					t.Fatal(err)
				}
				if end == "closed" {
					l.closed(true)
				}
				before := handler
				if d, _ := deliver(redelivered, &lane{}); handler != before+1 {
					t.Fatalf("a redelivery of the id with the hop's channel %s: handler not called (outcome %q)", end, d.Outcome())
				}
			}
			// A fresh message with the id never reads it.
			l = &lane{}
			if _, err := deliver(original, l); err != nil {
				t.Fatal(err)
			}
			l.closed(false)
			before := handler
			if deliver(original, &lane{}); handler != before+1 {
				t.Fatal("a fresh message with the id of a hop whose ack was lost: handler not called")
			}
		})
	}
}

// A plain ack remembers nothing: the memo stays empty, so the
// deliveries after it read no lock.
func TestPlainAckRemembersNothing(t *testing.T) {
	r := newRunner(HandlerFunc(func(context.Context, *Delivery) error { return nil }), nil, nil)
	rt := &memoRuntime{}
	d := NewDelivery("q", amqp.Delivery{MessageId: "m"}, rt)
	d.lane = &lane{}
	if err := r.Deliver(context.Background(), d); err != nil || d.Outcome() != OutcomeAck {
		t.Fatalf("settled with %v (%q), want an ack", err, d.Outcome())
	}
	if n := rt.memo.size.Load(); n != 0 {
		t.Fatalf("a plain ack left %d entries in the memo, want 0", n)
	}
}

// A refused hop's copy confirmed in the message's own queue is a fate
// carried out too (it reads requeue): its original's redelivery after a
// lost ack is acknowledged as it was, not handled again.
func TestRefusedHopCopyIsNotUndoneByALostAck(t *testing.T) {
	handler := 0
	h := HandlerFunc(func(context.Context, *Delivery) error {
		handler++
		return &Decision{Outcome: OutcomeDeadLetter, Queue: "q.dlq", Reason: ReasonExhausted, Cause: errors.New("fails")}
	})
	r := newRunner(h, nil, nil)
	rt := &memoRuntime{}
	rt.refuseTo = "q.dlq"
	l := &lane{}
	d := NewDelivery("q", amqp.Delivery{MessageId: "m"}, rt)
	d.lane = l
	if err := r.Deliver(context.Background(), d); err != nil || d.Outcome() != OutcomeRequeue || !d.homeCopy {
		t.Fatalf("a refused set-aside: settled with %v (%q, home copy %v), want nil (requeue, its copy in q)", err, d.Outcome(), d.homeCopy)
	}
	l.closed(false)
	a, aside := rt.memo.recall(amqp.Delivery{MessageId: "m", Redelivered: true})
	d = NewDelivery("q", amqp.Delivery{MessageId: "m", Redelivered: true}, rt)
	d.attempt, d.aside, d.lane = a, aside, &lane{}
	if err := r.Deliver(context.Background(), d); err != nil || d.Outcome() != OutcomeRequeue || handler != 1 {
		t.Fatalf("its redelivery after a lost ack: settled with %v (%q), handler ran %d times; want nil (requeue), 1", err, d.Outcome(), handler)
	}
	if len(rt.hops) != 2 {
		t.Fatalf("%d hops, want 2 (the refused one, its copy)", len(rt.hops))
	}
}
