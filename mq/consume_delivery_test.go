package mq_test

import (
	"context"
	"errors"
	"log/slog"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/mqtest"
)

func TestTestDelivery(t *testing.T) {
	raw := amqp.Delivery{
		Body: []byte("body"), ContentType: "text/plain", CorrelationId: "c1", MessageId: "m1",
		Headers: amqp.Table{"k": "v", mq.HeaderAttempt: int32(4)},
	}
	var got mq.Message
	var gotQueue string
	var gotKind mq.Outcome
	d := mqtest.NewDelivery("orders", raw, mqtest.OnHop(func(_ context.Context, q string, k mq.Outcome, m mq.Message) error {
		got, gotQueue, gotKind = m, q, k
		return nil
	}))
	if d.Queue() != "orders" || d.Attempt() != 4 {
		t.Fatalf("queue %q attempt %d, want orders 4", d.Queue(), d.Attempt())
	}
	if d.Draining() != nil {
		t.Error("a test delivery has no draining channel")
	}
	toDLQ := mq.HandlerFunc(func(context.Context, *mq.Delivery) error {
		return &mq.Decision{Outcome: mq.OutcomeDeadLetter, Queue: "orders.dlq", Reason: mq.ReasonRejected, Cause: errors.New("bad")}
	})
	if err := mqtest.Chain(toDLQ, nil).Handle(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	if gotQueue != "orders.dlq" || gotKind != mq.OutcomeDeadLetter || d.Outcome() != mq.OutcomeDeadLetter {
		t.Errorf("hopped to %q as %q, outcome %q", gotQueue, gotKind, d.Outcome())
	}
	if string(got.Body) != "body" || got.ContentType != "text/plain" || got.CorrelationId != "c1" || got.MessageId != "m1" {
		t.Errorf("hopped message changed: %+v", got)
	}
	if got.Headers["k"] != "v" || got.Headers[mq.HeaderAttempt] != int32(5) || got.Headers[mq.HeaderReason] != "rejected" || got.Headers[mq.HeaderError] != "bad" {
		t.Errorf("hopped headers %v", got.Headers)
	}
	if d.Headers["k"] != "v" || d.Headers[mq.HeaderReason] != nil || d.Headers[mq.HeaderAttempt] != int32(4) {
		t.Errorf("the hop edited the delivery's own headers: %v", d.Headers)
	}

	plain := mqtest.NewDelivery("q", amqp.Delivery{})
	if err := mqtest.Chain(toDLQ, nil).Handle(context.Background(), plain); !errors.Is(err, mq.ErrClosed) || !errors.Is(err, mq.ErrRequeue) {
		t.Errorf("a hop without Forward = %v, want a requeue for ErrClosed", err)
	}
	if plain.Logger() == nil {
		t.Error("a test delivery has a logger")
	}
}

// Events the runtime reports for a delivery carry its queue.
func TestTestDeliveryEventsCarryTheQueue(t *testing.T) {
	var got []mq.Event
	d := mqtest.NewDelivery("q", amqp.Delivery{}, mqtest.OnEvent(func(_ context.Context, e mq.Event) { got = append(got, e) }),
		mqtest.OnWait(func(context.Context, time.Duration) error { return nil }))
	h := mq.HandlerFunc(func(_ context.Context, d *mq.Delivery) error {
		if d.Attempt() < 3 {
			return &mq.Decision{Outcome: mq.OutcomeRetry, Wait: time.Second, Cause: errors.New("again")}
		}
		return nil
	})
	if err := mqtest.Chain(h, nil).Handle(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Queue != "q" || got[1].Queue != "q" || got[0].Name != mq.EventRetry || got[1].Attempt != 2 {
		t.Errorf("events %+v", got)
	}
}

type recHook struct{ trail *[]string }

func TestTestAttemptsNumbersCallsAndRunsHooks(t *testing.T) {
	var trail []string
	calls := 0
	h := mqtest.Chain(mq.HandlerFunc(func(_ context.Context, d *mq.Delivery) error {
		calls++
		switch calls {
		case 1:
			return errors.New("boom")
		case 2:
			panic("kaboom")
		}
		return nil
	}), []mq.AttemptHook{recHook{&trail}})
	d := mqtest.NewDelivery("q", amqp.Delivery{Headers: amqp.Table{mq.HeaderAttempt: int32(2)}})
	ctx := context.Background()
	if err := h.Handle(ctx, d); err == nil {
		t.Fatal("want the first call's error")
	}
	// The panic goes on after the hooks saw it, up to the runtime, which
	// returns the delivery to its queue.
	var pe *mq.PanicError
	if err := h.Handle(ctx, d); !errors.As(err, &pe) || pe.Value != "kaboom" || !errors.Is(err, mq.ErrRequeue) {
		t.Errorf("the panic must reach the runtime after the hooks saw it; got %v", err)
	}
	if err := h.Handle(ctx, d); err != nil {
		t.Fatal(err)
	}
	want := "attempt 2|done 2 boom|attempt 3|done 3 panic: kaboom|attempt 4|done 4"
	if got := strings.Join(trail, "|"); got != want {
		t.Errorf("hooks saw %q, want %q", got, want)
	}
}

func TestDeliveryHasNoSettlementMethods(t *testing.T) {
	for _, typ := range []reflect.Type{reflect.TypeOf(mq.Delivery{}), reflect.TypeOf(&mq.Delivery{})} {
		for _, m := range []string{"Ack", "Nack", "Reject"} {
			if _, ok := typ.MethodByName(m); ok {
				t.Errorf("%v has a %s method; settlement belongs to the runtime", typ, m)
			}
		}
	}
	d := mqtest.NewDelivery("q", amqp.Delivery{MessageId: "m-1", RoutingKey: "rk", Body: []byte("b")})
	if d.MessageId != "m-1" || d.RoutingKey != "rk" || string(d.Body) != "b" {
		t.Errorf("the amqp091-go fields are not promoted: %+v", d)
	}
}

// The message id has one spelling on both sides of the library: the
// amqp091-go one a Delivery carries.

func TestMessageAndDeliverySpellTheIdsAlike(t *testing.T) {
	msg := reflect.TypeOf(mq.Message{})
	del := reflect.TypeOf(amqp.Delivery{})
	for i := range msg.NumField() {
		f := msg.Field(i)
		if !f.IsExported() || f.Name == "Body" || f.Name == "Headers" {
			continue
		}
		if _, ok := del.FieldByName(f.Name); !ok {
			t.Errorf("Message.%s has no field of the same name on a delivery", f.Name)
		}
	}
}

func (h recHook) OnAttempt(ctx context.Context, d *mq.Delivery) context.Context {
	*h.trail = append(*h.trail, "attempt "+strconv.Itoa(d.Attempt()))
	return ctx
}

func (h recHook) OnAttemptDone(_ context.Context, d *mq.Delivery, err error) {
	s := "done " + strconv.Itoa(d.Attempt())
	if err != nil {
		s += " " + err.Error()
	}
	*h.trail = append(*h.trail, s)
}

// A Delivery made with new, outside any consumer and without mqtest,
// behaves as one built with no Runtime: it logs to slog.Default, cannot
// hop, has no server and nothing that drains it, and its waits sleep.
func TestZeroDeliveryStandsAlone(t *testing.T) {
	d := new(mq.Delivery)
	if d.Logger() != slog.Default() {
		t.Error("Logger of a zero Delivery is not slog.Default()")
	}
	toDLQ := mq.HandlerFunc(func(context.Context, *mq.Delivery) error {
		return &mq.Decision{Outcome: mq.OutcomeDeadLetter, Queue: "q.dlq", Reason: mq.ReasonRejected}
	})
	r, err := mq.NewRunner(toDLQ, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Deliver(context.Background(), d); !errors.Is(err, mq.ErrClosed) {
		t.Errorf("a hop of a zero Delivery = %v, want ErrClosed", err)
	}
	if d.Server() != "" || d.Draining() != nil {
		t.Errorf("zero Delivery: Server %q, Draining %v", d.Server(), d.Draining())
	}
	calls := 0
	waitOnce := mq.HandlerFunc(func(context.Context, *mq.Delivery) error {
		if calls++; calls%2 == 1 {
			return &mq.Decision{Outcome: mq.OutcomeRetry, Wait: 20 * time.Millisecond}
		}
		return nil
	})
	if r, err = mq.NewRunner(waitOnce, nil); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := r.Deliver(context.Background(), new(mq.Delivery)); err != nil || time.Since(start) < 20*time.Millisecond {
		t.Errorf("a wait of a zero Delivery = %v after %v", err, time.Since(start))
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := r.Deliver(ctx, new(mq.Delivery)); !errors.Is(err, mq.ErrRequeue) {
		t.Errorf("a wait with an ended context = %v, want a requeue", err)
	}
}
