package mq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/retry"
)

// hopRuntime is a Runtime whose hops fail while refuse is set, and that
// keeps every hop it was asked for.
type hopRuntime struct {
	mu     sync.Mutex
	refuse bool
	hops   []Message
	to     []string
}

func (r *hopRuntime) Hop(_ context.Context, queue string, _ Outcome, m Message) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.hops, r.to = append(r.hops, m), append(r.to, queue)
	if r.refuse {
		return fmt.Errorf("publish to %s: %w", queue, ErrNacked)
	}
	return nil
}
func (r *hopRuntime) Wait(context.Context, *Delivery, time.Duration) error { return nil }
func (r *hopRuntime) Event(context.Context, Event)                         {}
func (r *hopRuntime) Logger() *slog.Logger                                 { return slog.New(slog.DiscardHandler) }

// A copy whose set-aside was refused comes back (the field soak, seed
// 4242): its redelivery makes the set-aside again, with the headers the
// first try wrote, and the handler is not called a fourth time.
func TestAsideRefusedIsMadeAgainOnTheRedelivery(t *testing.T) {
	calls := 0
	h := HandlerFunc(func(_ context.Context, d *Delivery) error {
		calls++
		if d.Attempt() < 3 {
			return errors.New("fails") // no decision: a reject, not reached here
		}
		return &Decision{Outcome: OutcomeDeadLetter, Queue: "q.dlq", Reason: ReasonExhausted, Cause: fmt.Errorf("fails on attempt %d", d.Attempt())}
	})
	r := newRunner(h, nil, nil)
	rt := &hopRuntime{refuse: true}
	// Attempt 3, brought back by a rung: x-acemq-attempt is 3 already.
	raw := amqp.Delivery{MessageId: "m", Redelivered: true, Headers: amqp.Table{HeaderAttempt: attemptValue(3)}}
	var memo attemptMemo
	for i := range 3 {
		a, aside := memo.recall(raw)
		d := NewDelivery("q", raw, rt)
		d.attempt, d.aside = a, aside
		if err := r.Deliver(context.Background(), d); !errors.Is(err, ErrRequeue) {
			t.Fatalf("delivery %d: settled with %v, want a requeue while q.dlq refuses", i+1, err)
		}
		if !d.asideFailed {
			t.Fatalf("delivery %d: not marked as a failed set-aside", i+1)
		}
		memo.remember(d)
	}
	if calls != 1 {
		t.Fatalf("the handler was called %d times for 3 deliveries of a copy whose attempts were used, want 1", calls)
	}
	rt.refuse = false
	a, aside := memo.recall(raw)
	d := NewDelivery("q", raw, rt)
	d.attempt, d.aside = a, aside
	if err := r.Deliver(context.Background(), d); err != nil || d.Outcome() != OutcomeDeadLetter {
		t.Fatalf("once q.dlq accepts: settled with %v, outcome %q, want a dead letter", err, d.Outcome())
	}
	if calls != 1 {
		t.Fatalf("the handler was called %d times, want 1", calls)
	}
	// Each refused set-aside also tried to keep its copy in q (refused
	// too here: every queue refuses), then the consumer's memory took over.
	if len(rt.hops) != 7 {
		t.Fatalf("%d hops, want 7 (3 refused to q.dlq, each with its copy refused by q, 1 confirmed)", len(rt.hops))
	}
	for i, m := range rt.hops {
		if rt.to[i] == "q" && m.Headers[headerPendingHop] == "q.dlq" && AttemptOf(m.Headers) == 4 {
			continue
		}
		if rt.to[i] != "q.dlq" || AttemptOf(m.Headers) != 4 || m.Headers[HeaderReason] != string(ReasonExhausted) ||
			m.Headers[HeaderError] != "fails on attempt 3" || m.Headers[HeaderSourceQueue] != "q" {
			t.Fatalf("hop %d to %s carries %v, want q.dlq, attempt 4, exhausted, the third attempt's error", i+1, rt.to[i], m.Headers)
		}
	}
}

// policyMiddleware stands for a retry ladder: it runs a policy, and
// here decides a dead letter on every failure.
type policyMiddleware struct {
	next  Handler
	calls *int
}

func (p *policyMiddleware) RetryPolicy() retry.Policy { return retry.Policy{} }

func (p *policyMiddleware) Handle(ctx context.Context, d *Delivery) error {
	*p.calls++
	if err := p.next.Handle(ctx, d); err != nil {
		return &Decision{Outcome: OutcomeDeadLetter, Reason: ReasonExhausted, Cause: err}
	}
	return nil
}

// recordingOuter stands for the app's outermost middleware: it counts
// its calls and records the outcome it reads when next returns.
func recordingOuter(calls *int, outcomes *[]Outcome) Middleware {
	return func(next Handler) Handler {
		return HandlerFunc(func(ctx context.Context, d *Delivery) error {
			*calls++
			err := next.Handle(ctx, d)
			*outcomes = append(*outcomes, d.Outcome())
			return err
		})
	}
}

// A set-aside made again passes the middleware outside the one that
// decided it, once per delivery, and neither that one nor the handler:
// whether the carrier that made it is known (the consumer's memory) or
// not (then the one around the retry policy's middleware makes it).
func TestAsideMadeAgainPassesTheOuterMiddleware(t *testing.T) {
	for _, known := range []bool{true, false} {
		t.Run(fmt.Sprintf("place known %v", known), func(t *testing.T) {
			var outer, decider, handler int
			var outcomes []Outcome
			mws := []Middleware{
				recordingOuter(&outer, &outcomes),
				func(next Handler) Handler { return &policyMiddleware{next: next, calls: &decider} },
			}
			h := HandlerFunc(func(context.Context, *Delivery) error { handler++; return errors.New("fails") })
			r := newRunner(h, nil, mws)
			rt := &hopRuntime{refuse: true}
			raw := amqp.Delivery{MessageId: "m", Redelivered: true}
			var memo attemptMemo
			for i := range 3 {
				a, aside := memo.recall(raw)
				if aside != nil && !known {
					aside.at = 0 // as a set-aside carried on the message would come
				}
				d := NewDelivery("q", raw, rt)
				d.attempt, d.aside = a, aside
				if err := r.Deliver(context.Background(), d); !errors.Is(err, ErrRequeue) || d.Outcome() != OutcomeRequeue {
					t.Fatalf("delivery %d: settled with %v (%q), want a requeue while q.dlq refuses", i+1, err, d.Outcome())
				}
				memo.remember(d)
			}
			rt.refuse = false
			a, aside := memo.recall(raw)
			if aside != nil && !known {
				aside.at = 0
			}
			d := NewDelivery("q", raw, rt)
			d.attempt, d.aside = a, aside
			if err := r.Deliver(context.Background(), d); err != nil || d.Outcome() != OutcomeDeadLetter {
				t.Fatalf("once q.dlq accepts: settled with %v, outcome %q, want a dead letter", err, d.Outcome())
			}
			if outer != 4 || decider != 1 || handler != 1 {
				t.Errorf("4 deliveries: the outer middleware ran %d times (want 4), the deciding one %d (want 1), the handler %d (want 1)",
					outer, decider, handler)
			}
			want := []Outcome{OutcomeRequeue, OutcomeRequeue, OutcomeRequeue, OutcomeDeadLetter}
			if fmt.Sprint(outcomes) != fmt.Sprint(want) {
				t.Errorf("the outer middleware read %v, want %v", outcomes, want)
			}
		})
	}
}
