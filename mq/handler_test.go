package mq_test

import (
	"context"
	"errors"
	"math"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/mqtest"
)

func TestAttemptOf(t *testing.T) {
	huge := strings.Repeat("9", 40)
	cases := []struct {
		name string
		v    any
		want int
	}{
		{"int8", int8(3), 3},
		{"int8 negative", int8(-3), 1},
		{"int16", int16(4), 4},
		{"int32", int32(5), 5},
		{"int32 zero", int32(0), 1},
		{"int32 max", int32(math.MaxInt32), math.MaxInt32},
		{"int32 min", int32(math.MinInt32), 1},
		{"int64", int64(6), 6},
		{"int64 huge", int64(math.MaxInt64), math.MaxInt32},
		{"int64 min", int64(math.MinInt64), 1},
		{"int", 7, 7},
		{"int negative", -7, 1},
		{"uint", uint(8), 8},
		{"uint huge", uint(math.MaxUint), math.MaxInt32},
		{"uint8", uint8(9), 9},
		{"uint16", uint16(10), 10},
		{"uint32", uint32(11), 11},
		{"uint32 max", uint32(math.MaxUint32), math.MaxInt32},
		{"uint64", uint64(12), 12},
		{"uint64 max", uint64(math.MaxUint64), math.MaxInt32},
		{"float32", float32(3), 3},
		{"float32 2.9", float32(2.9), 2},
		{"float32 NaN", float32(math.NaN()), 1},
		{"float32 +Inf", float32(math.Inf(1)), math.MaxInt32},
		{"float64", 4.0, 4},
		{"float64 2.9", 2.9, 2},
		{"float64 NaN", math.NaN(), 1},
		{"float64 +Inf", math.Inf(1), math.MaxInt32},
		{"float64 -Inf", math.Inf(-1), 1},
		{"float64 negative", -2.5, 1},
		{"float64 0.5", 0.5, 1},
		{"float64 1e300", 1e300, math.MaxInt32},
		{"decimal 3", amqp.Decimal{Scale: 0, Value: 3}, 3},
		{"decimal 3.50", amqp.Decimal{Scale: 2, Value: 350}, 3},
		{"decimal negative", amqp.Decimal{Scale: 1, Value: -50}, 1},
		{"decimal scale 255", amqp.Decimal{Scale: 255, Value: math.MaxInt32}, 1},
		{"string", "3", 3},
		{"string spaces", " 4 ", 4},
		{"string tabs and newline", "\t5\n", 5},
		{"string float", "2.9", 2},
		{"string negative", "-4", 1},
		{"string zero", "0", 1},
		{"string junk", "x", 1},
		{"string empty", "", 1},
		{"string huge", huge, 1},
		{"string 20 digits", "99999999999999999999", math.MaxInt32},
		{"string NaN", "NaN", 1},
		{"string Inf", "Inf", math.MaxInt32},
		{"string max int64", strconv.FormatInt(math.MaxInt64, 10), math.MaxInt32},
		{"bytes", []byte("6"), 6},
		{"bytes spaces", []byte(" 7 "), 7},
		{"bytes junk", []byte{0xff, 0x00}, 1},
		{"bytes huge", []byte(strings.Repeat("1", 1<<16)), 1},
		{"bytes empty", []byte{}, 1},
		{"nested table", amqp.Table{"x-acemq-attempt": int32(9)}, 1},
		{"array", []any{int32(3)}, 1},
		{"bool", true, 1},
		{"time", time.Unix(5, 0), 1},
		{"nil", nil, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := mq.AttemptOf(amqp.Table{mq.HeaderAttempt: c.v}); got != c.want {
				t.Errorf("AttemptOf(%T %v) = %d, want %d", c.v, c.v, got, c.want)
			}
		})
	}
	t.Run("absent", func(t *testing.T) {
		if got := mq.AttemptOf(amqp.Table{"other": int32(5)}); got != 1 {
			t.Errorf("AttemptOf(no header) = %d, want 1", got)
		}
	})
	t.Run("nil table", func(t *testing.T) {
		if got := mq.AttemptOf(nil); got != 1 {
			t.Errorf("AttemptOf(nil) = %d, want 1", got)
		}
	})
}

func FuzzAttemptOf(f *testing.F) {
	f.Add("3", []byte(" 4 "), 2.9, int64(5))
	f.Add("", []byte{}, math.NaN(), int64(math.MinInt64))
	f.Add("1e400", []byte("-1"), math.Inf(1), int64(math.MaxInt64))
	f.Add(" -0x10 ", []byte("NaN"), -1e300, int64(0))
	f.Fuzz(func(t *testing.T, s string, b []byte, fl float64, n int64) {
		values := []any{
			s, b, fl, float32(fl), n, int32(n), int16(n), int8(n), uint64(n), uint32(n),
			uint16(n), uint8(n), int(n), uint(n),
			amqp.Decimal{Scale: uint8(n), Value: int32(n >> 8)},
		}
		for _, v := range values {
			got := mq.AttemptOf(amqp.Table{mq.HeaderAttempt: v})
			if got < 1 || got > math.MaxInt32 {
				t.Fatalf("AttemptOf(%T %v) = %d, out of [1, MaxInt32]", v, v, got)
			}
		}
	})
}

func TestChainOrder(t *testing.T) {
	var trail []string
	mw := func(name string) mq.Middleware {
		return func(next mq.Handler) mq.Handler {
			return mq.HandlerFunc(func(ctx context.Context, d *mq.Delivery) error {
				trail = append(trail, name+">")
				err := next.Handle(ctx, d)
				trail = append(trail, "<"+name)
				return err
			})
		}
	}
	h := mq.Chain(mq.HandlerFunc(func(context.Context, *mq.Delivery) error {
		trail = append(trail, "h")
		return nil
	}), mw("a"), nil, mw("b"))
	if err := h.Handle(context.Background(), mqtest.NewDelivery("q", amqp.Delivery{})); err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(trail, " "), "a> b> h <b <a"; got != want {
		t.Errorf("Chain(h, a, nil, b) ran %q, want %q", got, want)
	}
}

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

func TestRequeueError(t *testing.T) {
	cause := errors.New("cause")
	err := mq.Requeue(cause)
	if !errors.Is(err, mq.ErrRequeue) || !errors.Is(err, cause) {
		t.Errorf("Requeue(cause) = %v: must match ErrRequeue and cause", err)
	}
	if err := mq.Requeue(nil); !errors.Is(err, mq.ErrRequeue) || err.Error() != mq.ErrRequeue.Error() {
		t.Errorf("Requeue(nil) = %v", err)
	}
}

func TestPanicError(t *testing.T) {
	cause := errors.New("inner")
	pe := mq.NewPanicError(cause)
	if !errors.Is(pe, cause) || len(pe.Stack) == 0 || pe.Error() != "panic: inner" {
		t.Errorf("PanicError(err) = %v, unwraps %v, stack %d bytes", pe, errors.Unwrap(pe), len(pe.Stack))
	}
	if errors.Unwrap(mq.NewPanicError(42)) != nil {
		t.Error("a non-error panic value unwraps to nil")
	}
}

// A nil middleware in the list is skipped: the handler inside it must not
// be listed twice, or its Subscribe and Stop hooks would run twice.
func TestChainSkipsNilMiddleware(t *testing.T) {
	var subscribes int
	counting := func(next mq.Handler) mq.Handler { return &subscribeCounter{next, &subscribes} }
	b := mq.New(mq.Config{URLs: []string{"amqp://127.0.0.1:1/"}})
	_, err := b.Consume(context.Background(), "q", mq.HandlerFunc(func(context.Context, *mq.Delivery) error { return nil }),
		mq.WithMiddleware(nil, counting, nil))
	if !errors.Is(err, mq.ErrNotStarted) {
		t.Fatalf("Consume on a broker never started: %v, want ErrNotStarted", err)
	}
	if subscribes != 1 {
		t.Errorf("the middleware's Subscribe ran %d times, want 1", subscribes)
	}
}

type subscribeCounter struct {
	next mq.Handler
	n    *int
}

func (s *subscribeCounter) Handle(ctx context.Context, d *mq.Delivery) error {
	return s.next.Handle(ctx, d)
}

func (s *subscribeCounter) Subscribe(context.Context, *mq.Subscription) error {
	*s.n++
	return nil
}

// A Delivery must not offer settlement methods: amqp091-go's would always
// fail (the runtime withholds the acknowledger) and would bypass the
// runtime's settle-once, on-its-own-channel rule.
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
