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
	var gotKind mq.HopKind
	d := mqtest.NewDelivery("orders", raw, mqtest.Forward(func(_ context.Context, q string, k mq.HopKind, m mq.Message) error {
		got, gotQueue, gotKind = m, q, k
		return nil
	}))
	if d.Queue() != "orders" || d.Attempt() != 4 {
		t.Fatalf("queue %q attempt %d, want orders 4", d.Queue(), d.Attempt())
	}
	if d.Draining() != nil {
		t.Error("a test delivery has no draining channel")
	}
	if err := d.Forward(context.Background(), "orders.dlq", mq.HopDeadLetter, amqp.Table{"x-new": "n", "k": "over"}); err != nil {
		t.Fatal(err)
	}
	if gotQueue != "orders.dlq" || gotKind != mq.HopDeadLetter {
		t.Errorf("forwarded to %q as %q", gotQueue, gotKind)
	}
	if string(got.Body) != "body" || got.ContentType != "text/plain" || got.CorrelationId != "c1" || got.MessageId != "m1" {
		t.Errorf("forwarded message changed: %+v", got)
	}
	if got.Headers["x-new"] != "n" || got.Headers["k"] != "over" || got.Headers[mq.HeaderAttempt] != int32(4) {
		t.Errorf("forwarded headers %v", got.Headers)
	}
	if d.Headers["k"] != "v" || d.Headers["x-new"] != nil {
		t.Errorf("Forward edited the delivery's own headers: %v", d.Headers)
	}

	plain := mqtest.NewDelivery("q", amqp.Delivery{})
	if err := plain.Forward(context.Background(), "q.dlq", mq.HopDeadLetter, nil); !errors.Is(err, mq.ErrClosed) {
		t.Errorf("Forward without TestForward = %v, want ErrClosed", err)
	}
	if plain.Logger() == nil {
		t.Error("a test delivery has a logger")
	}
}

func TestTestDeliveryEmitFillsQueue(t *testing.T) {
	var got []mq.Event
	d := mqtest.NewDelivery("q", amqp.Delivery{}, mqtest.Events(func(_ context.Context, e mq.Event) { got = append(got, e) }))
	d.Emit(context.Background(), mq.Event{Name: mq.EventRetry})
	d.Emit(context.Background(), mq.Event{Name: mq.EventRetry, Queue: "other"})
	if len(got) != 2 || got[0].Queue != "q" || got[1].Queue != "other" {
		t.Errorf("events %+v", got)
	}
}

type recHook struct{ trail *[]string }

func TestTestAttemptsNumbersCallsAndRunsHooks(t *testing.T) {
	var trail []string
	calls := 0
	h := mqtest.Attempts(mq.HandlerFunc(func(_ context.Context, d *mq.Delivery) error {
		calls++
		switch calls {
		case 1:
			return errors.New("boom")
		case 2:
			panic("kaboom")
		}
		return nil
	}), recHook{&trail})
	d := mqtest.NewDelivery("q", amqp.Delivery{Headers: amqp.Table{mq.HeaderAttempt: int32(2)}})
	ctx := context.Background()
	if err := h.Handle(ctx, d); err == nil {
		t.Fatal("want the first call's error")
	}
	func() {
		defer func() {
			if r := recover(); r != "kaboom" {
				t.Errorf("the panic must go on after the hooks saw it; got %v", r)
			}
		}()
		_ = h.Handle(ctx, d)
	}()
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
// behaves as a test delivery with no options: it logs to slog.Default,
// cannot hop, has no server and nothing that drains it, and Wait sleeps.
func TestZeroDeliveryStandsAlone(t *testing.T) {
	d := new(mq.Delivery)
	if d.Logger() != slog.Default() {
		t.Error("Logger of a zero Delivery is not slog.Default()")
	}
	if err := d.Forward(context.Background(), "q", mq.HopRetry, nil); !errors.Is(err, mq.ErrClosed) {
		t.Errorf("Forward of a zero Delivery = %v, want ErrClosed", err)
	}
	if d.Server() != "" || d.Draining() != nil {
		t.Errorf("zero Delivery: Server %q, Draining %v", d.Server(), d.Draining())
	}
	d.Emit(context.Background(), mq.Event{Name: mq.EventRetry}) // no hooks: nothing to see, nothing to panic
	start := time.Now()
	if err := d.Wait(context.Background(), 20*time.Millisecond); err != nil || time.Since(start) < 20*time.Millisecond {
		t.Errorf("Wait of a zero Delivery = %v after %v", err, time.Since(start))
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := d.Wait(ctx, time.Hour); !errors.Is(err, mq.ErrWaitCut) {
		t.Errorf("Wait with an ended context = %v, want ErrWaitCut", err)
	}
}
