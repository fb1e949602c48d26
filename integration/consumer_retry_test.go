//go:build integration

package integration

// Issue 4, "Done when": the retry ladder, parking, dead letters and the
// contract's failure paths (docs/contract.md: "Retry policy", "Who declares what", "Hops") against the real broker.

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/internal/testenv"
	"github.com/acemq/acemq-go/middleware"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/retry"
	"github.com/acemq/acemq-go/topology"
)

// A handler failing twice then succeeding, under a policy whose waits are
// all broker rungs (1 s, 2 s): called exactly 3 times, the waits within
// ±1 s of the schedule, the queue and the rungs end empty.
func TestConsumerBrokerRungsThenSuccess(t *testing.T) {
	t.Parallel()
	b, lg := consBroker(t)
	p := retry.Waits(1*time.Second, 2*time.Second).With(retry.InProcessLimit(0))
	if got := p.BrokerRungs(); !slices.Equal(got, []time.Duration{time.Second, 2 * time.Second}) {
		t.Fatalf("BrokerRungs = %v", got)
	}
	q := testenv.Queue(t, b, p)
	calls := &consCalls{}
	h := mq.HandlerFunc(func(_ context.Context, d *mq.Delivery) error {
		if calls.add(d) < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	ctx := testenv.Context(t, 30*time.Second)
	c, err := b.Consume(ctx, q, h, middleware.Standard(p))
	if err != nil {
		t.Fatal(err)
	}
	defer testenv.Stop(t, c)
	testenv.Publish(t, b, q, mq.Message{Body: []byte("x"), MessageId: "rungs-1"})

	testenv.Eventually(t, 15*time.Second, func() bool { return calls.n() >= 3 }, "3 calls; got %d", calls.n())
	time.Sleep(300 * time.Millisecond) // a 4th call would be a bug
	at, attempts := calls.snapshot()
	if len(at) != 3 {
		t.Fatalf("the handler was called %d times, want 3", len(at))
	}
	if !slices.Equal(attempts, []int{1, 2, 3}) {
		t.Errorf("the handler saw attempts %v, want [1 2 3]", attempts)
	}
	for i, want := range p.Schedule() {
		got := at[i+1].Sub(at[i])
		t.Logf("wait %d: %v (schedule %v)", i+1, got.Round(time.Millisecond), want)
		if got < want-time.Second || got > want+time.Second {
			t.Errorf("wait %d took %v, want %v ± 1s", i+1, got, want)
		}
	}
	testenv.Stop(t, c)                 // anything unsettled would go back to its queue now
	time.Sleep(300 * time.Millisecond) // and reach its count a moment later
	for _, name := range []string{q, topology.RungQueue(q, time.Second), topology.RungQueue(q, 2*time.Second), topology.DeadLetterQueue(q), topology.ParkedQueue(q)} {
		if n := testenv.Count(t, b, name); n != 0 {
			t.Errorf("%s holds %d messages, want 0", name, n)
		}
	}
	if n := lg.Count(mq.EventRungMissing); n != 0 {
		t.Errorf("%d %s records", n, mq.EventRungMissing)
	}
}

// A handler that always fails ends in <q>.dlq after exactly `attempts`
// calls, with every contract header (docs/contract.md, "Headers"), the body and the properties unchanged. The
// policy has one in-process wait and one broker rung, so the message
// crosses both.
func TestConsumerExhaustedToDLQ(t *testing.T) {
	t.Parallel()
	b, _ := consBroker(t)
	p := retry.Waits(100*time.Millisecond, time.Second).With(retry.InProcessLimit(500 * time.Millisecond))
	q := testenv.Queue(t, b, p)
	calls := &consCalls{}
	h := mq.HandlerFunc(func(_ context.Context, d *mq.Delivery) error {
		n := calls.add(d)
		return fmt.Errorf("always fails (call %d)", n)
	})
	ctx := testenv.Context(t, 30*time.Second)
	c, err := b.Consume(ctx, q, h, middleware.Standard(p))
	if err != nil {
		t.Fatal(err)
	}
	defer testenv.Stop(t, c)

	ts := time.Now().Truncate(time.Second).Add(-time.Hour)
	sent := mq.Message{
		Body:            []byte(`{"order":42,"note":"ünïcode"}`),
		ContentType:     "application/json",
		ContentEncoding: "utf-8",
		Priority:        2,
		CorrelationId:   "corr-42",
		ReplyTo:         "goit.replies",
		MessageId:       "msg-42",
		Timestamp:       ts,
		Type:            "order.placed",
		AppId:           "goit-shop",
		Headers: amqp.Table{
			"x-tenant": "acme",
			"x-count":  int32(7),
			"x-nested": amqp.Table{"k": "v"},
		},
	}
	start := time.Now()
	testenv.Publish(t, b, q, sent)
	dlq := topology.DeadLetterQueue(q)
	testenv.Eventually(t, 15*time.Second, func() bool { return testenv.Count(t, b, dlq) == 1 }, "a message in %s", dlq)
	time.Sleep(200 * time.Millisecond)
	if n := calls.n(); n != p.Attempts() {
		t.Errorf("the handler was called %d times, want %d", n, p.Attempts())
	}
	_, attempts := calls.snapshot()
	if !slices.Equal(attempts, []int{1, 2, 3}) {
		t.Errorf("attempts %v, want [1 2 3]", attempts)
	}
	got := testenv.GetAll(t, b, dlq)
	if len(got) != 1 {
		t.Fatalf("%d messages in %s", len(got), dlq)
	}
	d := got[0]
	if string(d.Body) != string(sent.Body) || d.ContentType != sent.ContentType || d.ContentEncoding != sent.ContentEncoding ||
		d.Priority != sent.Priority || d.CorrelationId != sent.CorrelationId || d.ReplyTo != sent.ReplyTo ||
		d.MessageId != sent.MessageId || !d.Timestamp.Equal(ts) || d.Type != sent.Type || d.AppId != sent.AppId ||
		d.DeliveryMode != amqp.Persistent {
		t.Errorf("the dead letter's body or properties changed:\n got %+v\nsent %+v", d, sent)
	}
	for k, v := range sent.Headers {
		if !reflect.DeepEqual(d.Headers[k], v) {
			t.Errorf("header %s = %#v, want %#v", k, d.Headers[k], v)
		}
	}
	hd := d.Headers
	if v, ok := hd[mq.HeaderAttempt].(int32); !ok || v != int32(p.Attempts()+1) {
		t.Errorf("%s = %T %v, want int32 %d", mq.HeaderAttempt, hd[mq.HeaderAttempt], hd[mq.HeaderAttempt], p.Attempts()+1)
	}
	if hd[mq.HeaderSourceQueue] != q {
		t.Errorf("%s = %v, want %s", mq.HeaderSourceQueue, hd[mq.HeaderSourceQueue], q)
	}
	if hd[mq.HeaderReason] != string(mq.ReasonExhausted) {
		t.Errorf("%s = %v", mq.HeaderReason, hd[mq.HeaderReason])
	}
	if hd[mq.HeaderError] != "always fails (call 3)" {
		t.Errorf("%s = %v", mq.HeaderError, hd[mq.HeaderError])
	}
	if at, ok := hd[mq.HeaderFailedAt].(time.Time); !ok || at.Before(start.Add(-time.Second)) || at.After(time.Now()) {
		t.Errorf("%s = %T %v", mq.HeaderFailedAt, hd[mq.HeaderFailedAt], hd[mq.HeaderFailedAt])
	}
	for _, name := range []string{q, topology.RungQueue(q, time.Second), topology.ParkedQueue(q)} {
		if n := testenv.Count(t, b, name); n != 0 {
			t.Errorf("%s holds %d messages", name, n)
		}
	}
}

// Park(err) lands in <q>.parked after 1 call; Reject(err) in <q>.dlq.
func TestConsumerParkAndReject(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		mark   func(error) error
		target func(string) string
		reason mq.Reason
	}{
		{"park", middleware.Park, topology.ParkedQueue, mq.ReasonParked},
		{"reject", middleware.Reject, topology.DeadLetterQueue, mq.ReasonRejected},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b, _ := consBroker(t)
			p := retry.Fixed(5, 50*time.Millisecond)
			q := testenv.Queue(t, b, p)
			calls := &consCalls{}
			h := mq.HandlerFunc(func(_ context.Context, d *mq.Delivery) error {
				calls.add(d)
				return tc.mark(errors.New("needs a person"))
			})
			c, err := b.Consume(testenv.Context(t, 20*time.Second), q, h, middleware.Standard(p))
			if err != nil {
				t.Fatal(err)
			}
			defer testenv.Stop(t, c)
			testenv.Publish(t, b, q, mq.Message{Body: []byte("p"), MessageId: "mark-1", Headers: amqp.Table{"x-keep": "me"}})
			target := tc.target(q)
			testenv.Eventually(t, 10*time.Second, func() bool { return testenv.Count(t, b, target) == 1 }, "a message in %s", target)
			time.Sleep(200 * time.Millisecond)
			if n := calls.n(); n != 1 {
				t.Errorf("the handler was called %d times, want 1", n)
			}
			got := testenv.GetAll(t, b, target)
			if len(got) != 1 {
				t.Fatalf("%d messages in %s", len(got), target)
			}
			hd := got[0].Headers
			if hd[mq.HeaderReason] != string(tc.reason) || hd[mq.HeaderSourceQueue] != q || hd["x-keep"] != "me" ||
				hd[mq.HeaderAttempt] != int32(2) || !strings.Contains(fmt.Sprint(hd[mq.HeaderError]), "needs a person") {
				t.Errorf("headers %v", hd)
			}
			if _, ok := hd[mq.HeaderFailedAt].(time.Time); !ok {
				t.Errorf("no %s", mq.HeaderFailedAt)
			}
			if string(got[0].Body) != "p" || got[0].MessageId != "mark-1" {
				t.Errorf("body %q id %q", got[0].Body, got[0].MessageId)
			}
			other := topology.DeadLetterQueue(q)
			if tc.reason == mq.ReasonRejected {
				other = topology.ParkedQueue(q)
			}
			if n := testenv.Count(t, b, q) + testenv.Count(t, b, other); n != 0 {
				t.Errorf("%d messages elsewhere", n)
			}
		})
	}
}

// declare=false (WithoutDeclare), no rungs declared: the rung publish comes
// back, acemq.retry.rung.missing is logged and the message is set aside in
// <q>.dlq. With no dlq either: acemq.messages.set.aside.failed is logged
// and the message is still in its queue.
func TestConsumerWithoutDeclare(t *testing.T) {
	t.Parallel()
	p := retry.Waits(time.Second).With(retry.InProcessLimit(0))

	t.Run("rung missing", func(t *testing.T) {
		t.Parallel()
		b, lg := consBroker(t)
		q := testenv.Queue(t, b, p)
		dlq := topology.DeadLetterQueue(q)
		if err := b.Declare(testenv.Context(t, 10*time.Second), topology.New().Queue(dlq, topology.Classic())); err != nil {
			t.Fatal(err)
		}
		calls := &consCalls{}
		h := mq.HandlerFunc(func(_ context.Context, d *mq.Delivery) error { calls.add(d); return errors.New("fails") })
		c, err := b.Consume(testenv.Context(t, 20*time.Second), q, h, middleware.Standard(p, middleware.WithoutDeclare()))
		if err != nil {
			t.Fatal(err)
		}
		defer testenv.Stop(t, c)
		testenv.Publish(t, b, q, mq.Message{Body: []byte("r"), MessageId: "rung-missing-1"})
		testenv.Eventually(t, 10*time.Second, func() bool { return testenv.Count(t, b, dlq) == 1 }, "a message in %s", dlq)
		recs := lg.All(mq.EventRungMissing)
		if len(recs) != 1 || recs[0].Attrs["rung"] != topology.RungQueue(q, time.Second) {
			t.Errorf("%s records: %v", mq.EventRungMissing, recs)
		}
		if exists, err := b.QueueExists(testenv.Context(t, 5*time.Second), topology.RungQueue(q, time.Second)); err != nil || exists {
			t.Errorf("the rung exists (%v, %v): declare=false must declare nothing", exists, err)
		}
		got := testenv.GetAll(t, b, dlq)
		if len(got) != 1 || got[0].Headers[mq.HeaderReason] != string(mq.ReasonRungMissing) || got[0].Headers[mq.HeaderSourceQueue] != q {
			t.Fatalf("dlq holds %+v", got)
		}
		if calls.n() != 1 {
			t.Errorf("%d calls, want 1", calls.n())
		}
	})

	t.Run("no dlq either", func(t *testing.T) {
		t.Parallel()
		b, lg := consBroker(t)
		q := testenv.Queue(t, b, p)
		calls := &consCalls{}
		h := mq.HandlerFunc(func(_ context.Context, d *mq.Delivery) error { calls.add(d); return errors.New("fails") })
		c, err := b.Consume(testenv.Context(t, 20*time.Second), q, h,
			middleware.Standard(p, middleware.WithoutDeclare()), mq.WithRequeuePause(300*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		testenv.Publish(t, b, q, mq.Message{Body: []byte("r"), MessageId: "nothing-lost-1"})
		testenv.Eventually(t, 10*time.Second, func() bool { return lg.Count(mq.EventSetAsideFailed) >= 2 },
			"%s logged twice", mq.EventSetAsideFailed)
		testenv.Stop(t, c)
		testenv.WaitCount(t, b, q, 1, 5*time.Second) // nothing lost
		time.Sleep(200 * time.Millisecond)
		if n := testenv.Count(t, b, q); n != 1 {
			t.Errorf("%s holds %d messages after stop, want 1", q, n)
		}
		rec := lg.All(mq.EventSetAsideFailed)[0]
		if rec.Attrs["target"] != topology.DeadLetterQueue(q) || !strings.Contains(rec.Attrs["error"], "unroutable") {
			t.Errorf("record %v", rec)
		}
		if lg.Count(mq.EventRungMissing) < 1 {
			t.Errorf("no %s before the failed set-aside", mq.EventRungMissing)
		}
		// The pause keeps a set-aside that keeps failing from turning into a
		// hot loop.
		if n := calls.n(); n > 2*lg.Count(mq.EventSetAsideFailed)+2 {
			t.Errorf("%d calls for %d failed set-asides", n, lg.Count(mq.EventSetAsideFailed))
		}
		for _, name := range []string{topology.DeadLetterQueue(q), topology.ParkedQueue(q), topology.RungQueue(q, time.Second)} {
			if exists, err := b.QueueExists(testenv.Context(t, 5*time.Second), name); err != nil || exists {
				t.Errorf("%s exists (%v, %v): declare=false must declare nothing", name, exists, err)
			}
		}
	})
}

// A panic in the handler is retried like an error; the process lives.
func TestConsumerPanicIsRetried(t *testing.T) {
	t.Parallel()
	b, lg := consBroker(t)
	p := retry.Fixed(3, 50*time.Millisecond)
	q := testenv.Queue(t, b, p)
	var calls atomic.Int32
	h := mq.HandlerFunc(func(_ context.Context, d *mq.Delivery) error {
		n := calls.Add(1)
		if d.MessageId == "always" || n == 1 {
			panic(fmt.Sprintf("handler bug on %s", d.MessageId))
		}
		return nil
	})
	c, err := b.Consume(testenv.Context(t, 20*time.Second), q, h, middleware.Standard(p))
	if err != nil {
		t.Fatal(err)
	}
	defer testenv.Stop(t, c)

	testenv.Publish(t, b, q, mq.Message{Body: []byte("1"), MessageId: "once"})
	testenv.Eventually(t, 10*time.Second, func() bool { return calls.Load() >= 2 }, "a retry after the panic")
	time.Sleep(200 * time.Millisecond)
	if n := calls.Load(); n != 2 {
		t.Errorf("%d calls, want 2: one panic, one success", n)
	}
	if lg.Count("acemq.handler.panic") != 1 {
		t.Errorf("%d acemq.handler.panic records, want 1", lg.Count("acemq.handler.panic"))
	}

	calls.Store(0)
	testenv.Publish(t, b, q, mq.Message{Body: []byte("2"), MessageId: "always"})
	dlq := topology.DeadLetterQueue(q)
	testenv.Eventually(t, 10*time.Second, func() bool { return testenv.Count(t, b, dlq) == 1 }, "the always-panicking message in %s", dlq)
	if n := calls.Load(); n != int32(p.Attempts()) {
		t.Errorf("%d calls, want %d", n, p.Attempts())
	}
	got := testenv.GetAll(t, b, dlq)
	if len(got) != 1 || !strings.HasPrefix(fmt.Sprint(got[0].Headers[mq.HeaderError]), "panic: handler bug on always") {
		t.Errorf("dlq holds %+v", got)
	}
	select {
	case <-c.Done():
		t.Errorf("the consumer ended: %v", c.Err())
	default:
	}
	if n := testenv.Count(t, b, q); n != 0 {
		t.Errorf("%s holds %d", q, n)
	}
}
