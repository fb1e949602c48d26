package middleware

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/mqtest"
	"github.com/acemq/acemq-go/retry"
	"github.com/acemq/acemq-go/topology"
)

var errBoom = errors.New("boom")

// unroutable is how a hop publish to a missing queue fails.
func unroutable(q string) error {
	return fmt.Errorf("mq: publish to queue %q: %w", q, mq.ErrUnroutable)
}

// brokerOnly is a policy whose waits all go through broker rungs.
var brokerOnly = retry.Waits(time.Second, 2*time.Second).With(retry.InProcessLimit(0))

func TestLadderInProcessWaitsThenSucceeds(t *testing.T) {
	w := newWorld()
	s := &script{results: []error{errBoom, errBoom, nil}}
	h := mqtest.Chain(s, nil, RetryLadder(retry.Fixed(3, 20*time.Millisecond)))
	d := w.delivery("q", sample(nil))
	start := time.Now()
	if err := h.Handle(context.Background(), d); err != nil {
		t.Fatalf("Handle = %v, want nil", err)
	}
	if took := time.Since(start); took < 40*time.Millisecond {
		t.Errorf("two in-process waits of 20ms took %v", took)
	}
	if !slices.Equal(s.attempts, []int{1, 2, 3}) {
		t.Errorf("the handler saw attempts %v, want [1 2 3]", s.attempts)
	}
	if len(w.hops) != 0 {
		t.Errorf("in-process retries republished: %+v", w.hops)
	}
	if len(w.events) != 2 {
		t.Fatalf("events %+v, want two in-process retries", w.events)
	}
	for i, e := range w.events {
		if e.Name != mq.EventRetry || e.Kind != "in-process" || e.Attempt != i+1 || e.Wait != 20*time.Millisecond || !errors.Is(e.Err, errBoom) {
			t.Errorf("event %d = %+v", i, e)
		}
	}
	if d.Outcome() != mq.OutcomeAck {
		t.Errorf("outcome %q: a success reads as the ack it will be", d.Outcome())
	}
}

func TestLadderBrokerRungHop(t *testing.T) {
	cases := []struct {
		name     string
		attempt  any // the incoming x-acemq-attempt; nil: absent
		wait     time.Duration
		wantNext int32
	}{
		{"first delivery", nil, time.Second, 2},
		{"second delivery", int32(2), 2 * time.Second, 3},
		{"second delivery, attempt written as a string", "2", 2 * time.Second, 3},
		{"second delivery, attempt written as a float", 2.0, 2 * time.Second, 3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := newWorld()
			headers := amqp.Table{"custom": "v", "n": int64(5), "nested": amqp.Table{"a": int32(1)}}
			if c.attempt != nil {
				headers[mq.HeaderAttempt] = c.attempt
			}
			raw := sample(headers)
			s := &script{results: []error{errBoom}}
			d := w.delivery("orders", raw)
			err := mqtest.Chain(s, nil, RetryLadder(brokerOnly)).Handle(context.Background(), d)
			if err != nil {
				t.Fatalf("Handle = %v: a confirmed hop is a success", err)
			}
			if s.calls() != 1 {
				t.Errorf("%d calls before the hop, want 1", s.calls())
			}
			if len(w.hops) != 1 {
				t.Fatalf("hops %+v, want one", w.hops)
			}
			hp := w.hops[0]
			if want := topology.RungQueue("orders", c.wait); hp.queue != want || hp.kind != mq.OutcomeRetry {
				t.Errorf("hop to %q as %q, want %q as retry", hp.queue, hp.kind, want)
			}
			if v, ok := hp.m.Headers[mq.HeaderAttempt].(int32); !ok || v != c.wantNext {
				t.Errorf("%s = %T %v, want int32 %d", mq.HeaderAttempt, hp.m.Headers[mq.HeaderAttempt], hp.m.Headers[mq.HeaderAttempt], c.wantNext)
			}
			if hp.m.Headers[mq.HeaderSourceQueue] != "orders" {
				t.Errorf("%s = %v", mq.HeaderSourceQueue, hp.m.Headers[mq.HeaderSourceQueue])
			}
			for _, k := range []string{mq.HeaderReason, mq.HeaderError, mq.HeaderFailedAt} {
				if _, ok := hp.m.Headers[k]; ok {
					t.Errorf("a retry hop carries %s", k)
				}
			}
			sameProperties(t, raw, hp.m)
			if d.Outcome() != mq.OutcomeRetry || !errors.Is(d.Cause(), errBoom) {
				t.Errorf("outcome %q cause %v, want retry boom", d.Outcome(), d.Cause())
			}
			if got := w.eventNames(); !slices.Equal(got, []string{mq.EventRetry}) || w.events[0].Kind != "broker" || w.events[0].Target != hp.queue {
				t.Errorf("events %+v", w.events)
			}
			if _, ok := d.Headers[mq.HeaderSourceQueue]; ok {
				t.Error("the hop edited the delivery's own headers")
			}
		})
	}
}

func TestLadderExhaustedGoesToDLQ(t *testing.T) {
	w := newWorld()
	raw := sample(amqp.Table{mq.HeaderAttempt: int32(3), "custom": "v"})
	long := "x" + strings.Repeat("é", 3000) // 6001 bytes, the cap falls inside a rune
	cause := errors.New(long)
	d := w.delivery("orders", raw)
	before := time.Now().Add(-time.Second)
	err := mqtest.Chain(&script{results: []error{cause}}, nil, RetryLadder(brokerOnly)).Handle(context.Background(), d)
	if err != nil {
		t.Fatalf("Handle = %v", err)
	}
	if len(w.hops) != 1 {
		t.Fatalf("hops %+v, want one to the dlq", w.hops)
	}
	hp := w.hops[0]
	if hp.queue != topology.DeadLetterQueue("orders") || hp.kind != mq.OutcomeDeadLetter {
		t.Errorf("hop to %q as %q", hp.queue, hp.kind)
	}
	h := hp.m.Headers
	if v, ok := h[mq.HeaderAttempt].(int32); !ok || v != 4 {
		t.Errorf("%s = %T %v, want int32 4", mq.HeaderAttempt, h[mq.HeaderAttempt], h[mq.HeaderAttempt])
	}
	if h[mq.HeaderSourceQueue] != "orders" || h[mq.HeaderReason] != string(mq.ReasonExhausted) {
		t.Errorf("source %v reason %v", h[mq.HeaderSourceQueue], h[mq.HeaderReason])
	}
	text, _ := h[mq.HeaderError].(string)
	if len(text) > 4096 || len(text) < 4096-utf8.UTFMax || !utf8.ValidString(text) || !strings.HasPrefix(long, text) {
		t.Errorf("%s: %d bytes, valid %v, a prefix %v", mq.HeaderError, len(text), utf8.ValidString(text), strings.HasPrefix(long, text))
	}
	at, ok := h[mq.HeaderFailedAt].(time.Time)
	if !ok || at.Before(before) || at.After(time.Now()) || at.Location() != time.UTC {
		t.Errorf("%s = %T %v", mq.HeaderFailedAt, h[mq.HeaderFailedAt], h[mq.HeaderFailedAt])
	}
	sameProperties(t, raw, hp.m)
	if d.Outcome() != mq.OutcomeDeadLetter {
		t.Errorf("outcome %q", d.Outcome())
	}
}

func TestLadderInProcessExhausted(t *testing.T) {
	w := newWorld()
	s := &script{results: []error{errBoom}}
	d := w.delivery("q", sample(nil))
	if err := mqtest.Chain(s, nil, RetryLadder(retry.Fixed(3, time.Millisecond))).Handle(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(s.attempts, []int{1, 2, 3}) {
		t.Errorf("attempts %v", s.attempts)
	}
	if len(w.hops) != 1 || w.hops[0].queue != "q.dlq" || w.hops[0].m.Headers[mq.HeaderAttempt] != int32(4) || w.hops[0].m.Headers[mq.HeaderError] != "boom" {
		t.Errorf("hops %+v", w.hops)
	}
}

func TestCapError(t *testing.T) {
	ascii := strings.Repeat("a", 5000)
	twoByte := "x" + strings.Repeat("é", 3000)
	fourByte := "x" + strings.Repeat("😀", 2000)
	badEarly := "abc\xffdef" + strings.Repeat("g", 5000)
	cases := []struct {
		name string
		err  error
		want string
	}{
		{"nil", nil, ""},
		{"short", errors.New("short"), "short"},
		{"exactly the cap", errors.New(ascii[:4096]), ascii[:4096]},
		{"ascii", errors.New(ascii), ascii[:4096]},
		{"two-byte runes", errors.New(twoByte), twoByte[:4096-1]},
		{"four-byte runes", errors.New(fourByte), fourByte[:4096-3]},
		// Bytes that were never UTF-8 stay: only the cut is on a rune boundary.
		{"invalid byte early", errors.New(badEarly), badEarly[:4096]},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := mq.ErrorText(c.err); got != c.want {
				t.Errorf("mq.ErrorText: %d bytes, want %d", len(got), len(c.want))
			}
		})
	}
}

func TestLadderRungMissing(t *testing.T) {
	w := newWorld()
	rung := topology.RungQueue("orders", time.Second)
	w.fail = func(q string) error {
		if q == rung {
			return unroutable(q)
		}
		return nil
	}
	raw := sample(amqp.Table{"custom": "v"})
	d := w.delivery("orders", raw)
	s := &script{results: []error{errBoom}}
	if err := mqtest.Chain(s, nil, RetryLadder(brokerOnly)).Handle(context.Background(), d); err != nil {
		t.Fatalf("Handle = %v: the message is safe in the dlq", err)
	}
	if len(w.hops) != 2 || w.hops[0].queue != rung || w.hops[1].queue != "orders.dlq" || w.hops[1].kind != mq.OutcomeDeadLetter {
		t.Fatalf("hops %+v, want the rung then the dlq", w.hops)
	}
	h := w.hops[1].m.Headers
	if h[mq.HeaderReason] != string(mq.ReasonRungMissing) || h[mq.HeaderSourceQueue] != "orders" || h[mq.HeaderError] != "boom" {
		t.Errorf("dlq headers %v", h)
	}
	if _, ok := h[mq.HeaderFailedAt].(time.Time); !ok {
		t.Errorf("no %s", mq.HeaderFailedAt)
	}
	sameProperties(t, raw, w.hops[1].m)
	if got := w.eventNames(); !slices.Equal(got, []string{mq.EventRungMissing}) || w.events[0].Target != rung || w.events[0].Queue != "orders" {
		t.Errorf("events %+v, want one %s", w.events, mq.EventRungMissing)
	}
	rec, ok := w.logs.find(mq.EventRungMissing)
	if !ok {
		t.Fatalf("no log record %q", mq.EventRungMissing)
	}
	if rec.Level != slog.LevelWarn || attrs(rec)["rung"].String() != rung {
		t.Errorf("record %v %v", rec.Level, attrs(rec))
	}
	if d.Outcome() != mq.OutcomeDeadLetter {
		t.Errorf("outcome %q", d.Outcome())
	}
}

func TestSetAsideFailureRequeues(t *testing.T) {
	cases := []struct {
		name    string
		policy  retry.Policy
		header  any
		result  error
		mws     []mq.Middleware
		missing string // the queue whose publish fails
		hops    []string
	}{
		{"exhausted, no dlq", brokerOnly, int32(3), errBoom, nil, "orders.dlq", []string{"orders.dlq"}},
		{"rung missing, no dlq either", brokerOnly, nil, errBoom, nil, "", []string{"orders.retry.1s", "orders.dlq"}},
		{"park, no parked queue", brokerOnly, nil, Park(errBoom), []mq.Middleware{Parking()}, "orders.parked", []string{"orders.parked"}},
		{"reject, no dlq", brokerOnly, nil, Reject(errBoom), []mq.Middleware{Parking()}, "orders.dlq", []string{"orders.dlq"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := newWorld()
			// The home queue refuses too: the copy that would carry the
			// pending set-aside cannot be kept there either.
			w.fail = func(q string) error {
				if c.missing == "" || q == c.missing || q == "orders" {
					return unroutable(q)
				}
				return nil
			}
			hd := amqp.Table{}
			if c.header != nil {
				hd[mq.HeaderAttempt] = c.header
			}
			d := w.delivery("orders", sample(hd))
			mws := append([]mq.Middleware{RetryLadder(c.policy)}, c.mws...)
			err := mqtest.Chain(&script{results: []error{c.result}}, nil, mws...).Handle(context.Background(), d)
			if !errors.Is(err, mq.ErrRequeue) {
				t.Fatalf("Handle = %v, want an error matching mq.ErrRequeue", err)
			}
			if !errors.Is(err, mq.ErrUnroutable) {
				t.Errorf("Handle = %v: should say the publish was unroutable", err)
			}
			var got []string
			for _, hp := range w.hops {
				got = append(got, hp.queue)
			}
			if want := append(slices.Clone(c.hops), "orders"); !slices.Equal(got, want) {
				t.Errorf("hops %v, want %v", got, want)
			}
			names := w.eventNames()
			if len(names) == 0 || names[len(names)-1] != mq.EventSetAsideFailed {
				t.Errorf("events %v, want %s last", names, mq.EventSetAsideFailed)
			}
			rec, ok := w.logs.find(mq.EventSetAsideFailed)
			if !ok {
				t.Fatalf("no log record %q", mq.EventSetAsideFailed)
			}
			if rec.Level != slog.LevelError || attrs(rec)["target"].String() != c.hops[len(c.hops)-1] {
				t.Errorf("record %v %v", rec.Level, attrs(rec))
			}
			if d.Outcome() == mq.OutcomeDeadLetter || d.Outcome() == mq.OutcomePark {
				t.Errorf("outcome %q for a message that was not set aside", d.Outcome())
			}
		})
	}
}

func TestLadderRungPublishFailsRequeues(t *testing.T) {
	w := newWorld()
	w.fail = func(string) error { return mq.ErrNacked }
	d := w.delivery("orders", sample(nil))
	err := mqtest.Chain(&script{results: []error{errBoom}}, nil, RetryLadder(brokerOnly)).Handle(context.Background(), d)
	if !errors.Is(err, mq.ErrRequeue) || !errors.Is(err, mq.ErrNacked) {
		t.Fatalf("Handle = %v, want a requeue saying nacked", err)
	}
	// A nacked rung publish is not a missing rung: no .dlq; the copy that
	// would keep the pending hop in orders is nacked too.
	if len(w.hops) != 2 || w.hops[1].queue != "orders" {
		t.Errorf("hops %+v: want the rung, then orders", w.hops)
	}
}

func TestLadderWaitCutShortByContext(t *testing.T) {
	w := newWorld()
	s := &script{results: []error{errBoom}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	time.AfterFunc(30*time.Millisecond, cancel)
	start := time.Now()
	err := mqtest.Chain(s, nil, RetryLadder(retry.Fixed(2, 10*time.Second))).Handle(ctx, w.delivery("q", sample(nil)))
	if !errors.Is(err, mq.ErrRequeue) || !errors.Is(err, errBoom) {
		t.Fatalf("Handle = %v, want Requeue(boom)", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("the cut wait took %v", took)
	}
	if s.calls() != 1 || len(w.hops) != 0 {
		t.Errorf("%d calls, hops %+v", s.calls(), w.hops)
	}
}

func TestLadderContextGoneNoHop(t *testing.T) {
	// The channel is gone (the handler's context ended) when the attempt
	// fails: the broker requeues the message itself, a hop would duplicate it.
	w := newWorld()
	ctx, cancel := context.WithCancel(context.Background())
	h := mq.HandlerFunc(func(context.Context, *mq.Delivery) error { cancel(); return errBoom })
	err := mqtest.Chain(h, nil, RetryLadder(brokerOnly)).Handle(ctx, w.delivery("q", sample(nil)))
	if !errors.Is(err, mq.ErrRequeue) || len(w.hops) != 0 {
		t.Errorf("Handle = %v, hops %+v", err, w.hops)
	}
}

func TestLadderNeverRetriesMarkedErrors(t *testing.T) {
	for _, marked := range []error{Park(errBoom), Reject(errBoom), mq.Requeue(errBoom)} {
		t.Run(marked.Error(), func(t *testing.T) {
			w := newWorld()
			s := &script{results: []error{marked}}
			err := mqtest.Chain(s, nil, RetryLadder(retry.Fixed(5, time.Millisecond))).Handle(context.Background(), w.delivery("q", sample(nil)))
			if err != marked {
				t.Errorf("Handle = %v, want %v unchanged", err, marked)
			}
			if s.calls() != 1 || len(w.hops) != 0 || len(w.events) != 0 {
				t.Errorf("%d calls, hops %+v, events %+v", s.calls(), w.hops, w.events)
			}
		})
	}
}

func TestLadderSubscribeValidatesPolicy(t *testing.T) {
	bad := RetryLadder(retry.Waits(1500 * time.Millisecond).With(retry.InProcessLimit(0)))(nopHandler)
	if err := bad.(mq.Subscriber).Subscribe(context.Background(), &mq.Subscription{Queue: "q"}); !errors.Is(err, retry.ErrInvalid) {
		t.Errorf("Subscribe with a 1.5s rung = %v, want retry.ErrInvalid", err)
	}
	good := RetryLadder(brokerOnly)(nopHandler)
	if err := good.(mq.Subscriber).Subscribe(context.Background(), &mq.Subscription{Queue: "q"}); err != nil {
		t.Errorf("Subscribe = %v", err)
	}
	if p := good.(interface{ RetryPolicy() retry.Policy }).RetryPolicy(); !p.Equal(brokerOnly) {
		t.Errorf("RetryPolicy = %v", p)
	}
}

var nopHandler = mq.HandlerFunc(func(context.Context, *mq.Delivery) error { return nil })
