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
	"github.com/acemq/acemq-go/topology"
)

// targetRuntime is a Runtime that refuses hops to the queues in refused
// (the broker nacks them) and keeps every hop it was asked for.
type targetRuntime struct {
	mu      sync.Mutex
	refused map[string]bool
	hops    []Message
	to      []string
}

func (r *targetRuntime) Hop(_ context.Context, queue string, _ Outcome, m Message) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.hops, r.to = append(r.hops, m), append(r.to, queue)
	if r.refused[queue] {
		return fmt.Errorf("publish to %s: %w", queue, ErrNacked)
	}
	return nil
}
func (r *targetRuntime) Wait(context.Context, *Delivery, time.Duration) error { return nil }
func (r *targetRuntime) Event(context.Context, Event)                         {}
func (r *targetRuntime) Logger() *slog.Logger                                 { return slog.New(slog.DiscardHandler) }

// last is the last hop made to queue, and whether there was one.
func (r *targetRuntime) last(queue string) (Message, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(r.to) - 1; i >= 0; i-- {
		if r.to[i] == queue {
			return r.hops[i], true
		}
	}
	return Message{}, false
}

// redelivery is m as the broker delivers it again from q.
func redelivery(m Message) amqp.Delivery {
	return amqp.Delivery{MessageId: m.MessageId, Body: m.Body, Headers: m.Headers, RoutingKey: "q"}
}

// Every copy the library publishes drops the broker's own counters: a
// quorum queue keeps a published x-delivery-count, and the consumer would
// count those returns a second time (issue 38, defect 1).
func TestCopiesDropTheBrokerCounters(t *testing.T) {
	raw := amqp.Delivery{MessageId: "m", Headers: amqp.Table{
		headerDeliveryCount: int64(3), headerAcquiredCount: int64(4), "k": "v", HeaderAttempt: int32(2)}}
	for name, m := range map[string]Message{
		"MessageOf":  MessageOf(raw),
		"hopMessage": NewDelivery("q", raw, nil).hopMessage(),
	} {
		for _, h := range []string{headerDeliveryCount, headerAcquiredCount} {
			if v, ok := m.Headers[h]; ok {
				t.Errorf("%s: the copy keeps %s=%v", name, h, v)
			}
		}
		if m.Headers["k"] != "v" || AttemptOf(m.Headers) != 2 {
			t.Errorf("%s: headers %v, want the message's own kept", name, m.Headers)
		}
	}
	if _, ok := raw.Headers[headerDeliveryCount]; !ok {
		t.Error("the delivery's own headers were changed")
	}
}

// A rung that refuses the hop (full, reject-publish) does not make the
// message skip its wait: the handler is not called again, the hop is made
// again, after a restart too (a fresh runner, no memory), and the copy
// that finally reaches the rung is the attempt the failure asked for
// (issue 38, defects 3 and 5).
func TestRefusedRungHopIsMadeAgainNotRetried(t *testing.T) {
	const rung = "q.retry.5s"
	calls := 0
	h := HandlerFunc(func(_ context.Context, d *Delivery) error {
		calls++
		return &Decision{Outcome: OutcomeRetry, Queue: rung, Wait: 5 * time.Second, Cause: fmt.Errorf("fails on attempt %d", d.Attempt())}
	})
	rt := &targetRuntime{refused: map[string]bool{rung: true}}
	raw := amqp.Delivery{MessageId: "m", Body: []byte("x"), Headers: amqp.Table{headerDeliveryCount: int64(1)}}
	d := NewDelivery("q", raw, rt)
	err := newRunner(h, nil, nil).Deliver(context.Background(), d)
	if err != nil {
		t.Fatalf("refused rung: settled with %v, want the pending hop kept on a copy in q and the original acknowledged", err)
	}
	home, ok := rt.last("q")
	if !ok {
		t.Fatalf("no copy kept in q; hops to %v", rt.to)
	}
	if a := AttemptOf(home.Headers); a != 2 {
		t.Errorf("the copy kept in q carries attempt %d, want 2", a)
	}
	// Delivered again, by a new process: the hop is made again, refused
	// again, and the handler is not called.
	for i := range 3 {
		d := NewDelivery("q", redelivery(home), rt)
		err := newRunner(h, nil, nil).Deliver(context.Background(), d)
		if !errors.Is(err, ErrRequeue) || !d.asideFailed {
			t.Fatalf("redelivery %d while the rung refuses: settled with %v (library's failure %v), want a requeue after the pause", i+1, err, d.asideFailed)
		}
	}
	if calls != 1 {
		t.Fatalf("the handler was called %d times while the rung refused, want 1", calls)
	}
	rt.refused[rung] = false
	d = NewDelivery("q", redelivery(home), rt)
	if err := newRunner(h, nil, nil).Deliver(context.Background(), d); err != nil || d.Outcome() != OutcomeRetry {
		t.Fatalf("once the rung accepts: settled with %v, outcome %q, want a retry", err, d.Outcome())
	}
	got, _ := rt.last(rung)
	if a := AttemptOf(got.Headers); a != 2 || calls != 1 {
		t.Fatalf("the rung got attempt %d after %d handler calls, want attempt 2 after 1", a, calls)
	}
	if s := got.Headers[HeaderSourceQueue]; s != "q" {
		t.Errorf("the rung's copy has source queue %v, want q", s)
	}
	for k := range got.Headers {
		if k != HeaderAttempt && k != HeaderSourceQueue && k != HeaderOriginalExchange && k != HeaderOriginalRoutingKey {
			t.Errorf("the rung's copy carries %s=%v", k, got.Headers[k])
		}
	}
}

// A set-aside refused by .dlq is carried on the message: a new process
// (no memory of it) makes the set-aside again and never calls the handler
// for a message whose attempts are used (issue 38, defect 5).
func TestRefusedAsideIsCarriedOnTheMessage(t *testing.T) {
	calls := 0
	h := HandlerFunc(func(_ context.Context, d *Delivery) error {
		calls++
		return &Decision{Outcome: OutcomeDeadLetter, Queue: "q.dlq", Reason: ReasonExhausted, Cause: fmt.Errorf("fails on attempt %d", d.Attempt())}
	})
	rt := &targetRuntime{refused: map[string]bool{"q.dlq": true}}
	raw := amqp.Delivery{MessageId: "m", Body: []byte("x"), Headers: amqp.Table{HeaderAttempt: attemptValue(3)}}
	if err := newRunner(h, nil, nil).Deliver(context.Background(), NewDelivery("q", raw, rt)); err != nil {
		t.Fatalf("refused set-aside: settled with %v, want the set-aside kept on a copy in q and the original acknowledged", err)
	}
	home, ok := rt.last("q")
	if !ok {
		t.Fatalf("no copy kept in q; hops to %v", rt.to)
	}
	for i := range 2 {
		d := NewDelivery("q", redelivery(home), rt)
		if err := newRunner(h, nil, nil).Deliver(context.Background(), d); !errors.Is(err, ErrRequeue) || !d.asideFailed {
			t.Fatalf("redelivery %d after a restart: settled with %v, want the set-aside made again and a requeue", i+1, err)
		}
	}
	rt.refused["q.dlq"] = false
	d := NewDelivery("q", redelivery(home), rt)
	if err := newRunner(h, nil, nil).Deliver(context.Background(), d); err != nil || d.Outcome() != OutcomeDeadLetter {
		t.Fatalf("once q.dlq accepts: settled with %v, outcome %q", err, d.Outcome())
	}
	if calls != 1 {
		t.Fatalf("the handler was called %d times, want 1", calls)
	}
	got, _ := rt.last("q.dlq")
	if AttemptOf(got.Headers) != 4 || got.Headers[HeaderReason] != string(ReasonExhausted) || got.Headers[HeaderError] != "fails on attempt 3" {
		t.Fatalf(".dlq got headers %v, want attempt 4, exhausted, the third attempt's error", got.Headers)
	}
	if _, ok := got.Headers["x-acemq-pending-hop"]; ok {
		t.Error(".dlq's copy still names a pending hop")
	}
}

// A one-attempt policy is a policy: the Broker declared one for the queue
// (issue 38, defect 7).
func TestOneAttemptPolicyIsDeclared(t *testing.T) {
	one := retry.Fixed(1, time.Second)
	var r remembered
	r.queues = topology.New().Queue("q", topology.Retry(one)).Queue("plain").Queues()
	if p, ok := r.declaredRetry("q"); !ok || !p.Equal(one) {
		t.Fatalf("declaredRetry(q) = %v, %v; want the one-attempt policy", p, ok)
	}
	if _, ok := r.declaredRetry("plain"); ok {
		t.Fatal("declaredRetry(plain) found a policy where none was given")
	}
}

// A pending hop is honoured only for the queue's own .dlq, .parked and
// rungs: a header naming any other queue cannot send a message there.
func TestPendingHopOnlyToTheQueuesOwnTargets(t *testing.T) {
	for target, pending := range map[string]bool{
		"q.dlq": true, "q.parked": true, "q.retry.5s": true, "q.retry.5s.quorum": true,
		"other.dlq": false, "q": false, "qq.dlq": false, "": false,
	} {
		calls := 0
		h := HandlerFunc(func(context.Context, *Delivery) error { calls++; return nil })
		rt := &targetRuntime{}
		raw := amqp.Delivery{MessageId: "m", Headers: amqp.Table{headerPendingHop: target, HeaderAttempt: int32(4)}}
		d := NewDelivery("q", raw, rt)
		if err := newRunner(h, nil, nil).Deliver(context.Background(), d); err != nil {
			t.Fatalf("%q: %v", target, err)
		}
		if pending {
			if got, ok := rt.last(target); calls != 0 || !ok || AttemptOf(got.Headers) != 4 {
				t.Errorf("%q: %d handler calls, hops to %v: want the pending hop made with attempt 4", target, calls, rt.to)
			}
			continue
		}
		if calls != 1 || len(rt.to) != 0 {
			t.Errorf("%q: %d handler calls, hops to %v: want the header ignored", target, calls, rt.to)
		}
	}
}

// A delivery whose channel is lost (its context ended) cannot be
// acknowledged: a refused hop is not kept on a copy (the broker returns
// the original anyway), and the consumer remembers it instead.
func TestRefusedHopOnALostChannelIsRemembered(t *testing.T) {
	calls := 0
	h := HandlerFunc(func(context.Context, *Delivery) error {
		calls++
		return &Decision{Outcome: OutcomeDeadLetter, Queue: "q.dlq", Reason: ReasonExhausted, Cause: errors.New("fails")}
	})
	rt := &targetRuntime{refused: map[string]bool{"q.dlq": true}}
	ctx, cancel := context.WithCancel(context.Background())
	rt2 := &cancelOnHop{targetRuntime: rt, cancel: cancel}
	raw := amqp.Delivery{MessageId: "m", Headers: amqp.Table{HeaderAttempt: attemptValue(3)}}
	d := NewDelivery("q", raw, rt2)
	if err := newRunner(h, nil, nil).Deliver(ctx, d); !errors.Is(err, ErrRequeue) || d.aside == nil {
		t.Fatalf("settled with %v (remembered: %v), want a requeue the consumer remembers", err, d.aside != nil)
	}
	if _, ok := rt.last("q"); ok {
		t.Errorf("a copy was kept in q on a lost channel: hops to %v", rt.to)
	}
}

// cancelOnHop ends the delivery's context at its first hop, as a channel
// lost under it does.
type cancelOnHop struct {
	*targetRuntime
	cancel context.CancelFunc
}

func (r *cancelOnHop) Hop(ctx context.Context, queue string, kind Outcome, m Message) error {
	r.cancel()
	return r.targetRuntime.Hop(ctx, queue, kind, m)
}

// A copy that names its refused hop, which the consumer also remembers
// (attemptMemo, after an earlier return of the same copy), goes back as it
// is while the target refuses: never as a further copy, which would start
// the broker's count of its returns, and so the growing pause, again.
func TestRememberedPendingCopyGoesBackAsItIs(t *testing.T) {
	const rung = "q.retry.5s"
	h := HandlerFunc(func(_ context.Context, d *Delivery) error {
		return &Decision{Outcome: OutcomeRetry, Queue: rung, Wait: 5 * time.Second, Cause: errors.New("fails")}
	})
	rt := &targetRuntime{refused: map[string]bool{rung: true}}
	raw := amqp.Delivery{MessageId: "m", Body: []byte("x")}
	if err := newRunner(h, nil, nil).Deliver(context.Background(), NewDelivery("q", raw, rt)); err != nil {
		t.Fatalf("refused rung: settled with %v, want the hop kept on a copy in q", err)
	}
	home, _ := rt.last("q")
	copies := len(rt.to)
	r := newRunner(h, nil, nil)
	d := NewDelivery("q", redelivery(home), rt)
	d.aside = &asideRetry{target: rung, outcome: OutcomeRetry, wait: 5 * time.Second}
	if err := r.Deliver(context.Background(), d); !errors.Is(err, ErrRequeue) || !d.asideFailed {
		t.Fatalf("remembered copy while the rung refuses: settled with %v (library's failure %v), want it returned as it is", err, d.asideFailed)
	}
	if n := len(rt.to) - copies; n != 1 || rt.to[len(rt.to)-1] != rung {
		t.Fatalf("hops after the remembered copy's delivery: %v, want only the one to %s", rt.to[copies:], rung)
	}
}

// eventRuntime is a targetRuntime that keeps its events.
type eventRuntime struct {
	targetRuntime
	events []Event
}

func (r *eventRuntime) Event(_ context.Context, e Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

// A pending hop to a rung is read with topology.ParseRung, the one reader
// of rung names: a durable rung is a rung of the queue with the wait its
// name says, and a name that only starts like one of the queue's rungs (a
// rung of another queue, a wait no rung has) is not a target (issue 40).
func TestPendingHopToARungReadsItsName(t *testing.T) {
	for target, wait := range map[string]time.Duration{
		"q.retry.5s": 5 * time.Second, "q.retry.5s.quorum": 5 * time.Second, "q.retry.2m.quorum": 2 * time.Minute,
		"q.retry.x.retry.5s": 0, "q.retry.x.retry.5s.quorum": 0, "q.retry.5s.quorum.quorum": 0,
		"q.retry.soon": 0, "q.retry.05s": 0, "q.retry.5s.classic": 0,
	} {
		calls := 0
		h := HandlerFunc(func(context.Context, *Delivery) error { calls++; return nil })
		rt := &eventRuntime{}
		raw := amqp.Delivery{MessageId: "m", Headers: amqp.Table{headerPendingHop: target, HeaderAttempt: int32(3)}}
		d := NewDelivery("q", raw, rt)
		if err := newRunner(h, nil, nil).Deliver(context.Background(), d); err != nil {
			t.Fatalf("%q: %v", target, err)
		}
		if wait == 0 {
			if calls != 1 || len(rt.to) != 0 {
				t.Errorf("%q: %d handler calls, hops to %v: want the header ignored", target, calls, rt.to)
			}
			continue
		}
		var got []Event
		for _, e := range rt.events {
			if e.Name == EventRetry {
				got = append(got, e)
			}
		}
		if calls != 0 || len(rt.to) != 1 || rt.to[0] != target || len(got) != 1 || got[0].Wait != wait || got[0].Target != target || got[0].Kind != kindBroker {
			t.Errorf("%q: %d handler calls, hops to %v, retry events %+v: want the hop made once as a broker wait of %v", target, calls, rt.to, got, wait)
		}
	}
}
