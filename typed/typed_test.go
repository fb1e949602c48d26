package typed_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq-go/middleware"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/mqtest"
	"github.com/acemq/acemq-go/retry"
	"github.com/acemq/acemq-go/typed"
)

type order struct {
	ID    string `json:"id"`
	Total int    `json:"total"`
}

var policy = retry.Exponential(5, time.Second)

func TestHandlerDecodes(t *testing.T) {
	var got []order
	h := typed.Handler(func(_ context.Context, d *mq.Delivery, o order) error {
		got = append(got, o)
		return nil
	})
	r := mqtest.New(t, "orders", h, middleware.Standard(policy)).Deliver(mq.Message{Body: []byte(`{"id":"o-1","total":12,"new":true}`)})
	if r.Outcome != mq.OutcomeAck || len(got) != 1 || got[0] != (order{ID: "o-1", Total: 12}) {
		t.Fatalf("result %v, decoded %+v", r, got)
	}
}

// A body that does not decode goes to .dlq, reason rejected, the decode
// error as its text, after one attempt and no retry; fn is never called.
func TestUndecodableBodyIsRejected(t *testing.T) {
	called := false
	h := typed.Handler(func(context.Context, *mq.Delivery, order) error { called = true; return nil })
	r := mqtest.New(t, "orders", h, middleware.Standard(policy)).Deliver(mq.Message{Body: []byte(`{"id": 7`)})
	if called {
		t.Error("fn was called with a body that does not decode")
	}
	if r.Outcome != mq.OutcomeDeadLetter || r.Attempts != 1 || len(r.Waits) != 0 || len(r.Hops) != 1 {
		t.Fatalf("result %v, want one dead letter after one attempt", r)
	}
	h0 := r.Hops[0]
	if h0.Queue != "orders.dlq" || h0.Reason() != mq.ReasonRejected {
		t.Fatalf("hop to %s reason %q", h0.Queue, h0.Reason())
	}
	if want := "decode application/json body: unexpected end of JSON input"; h0.Error() != want {
		t.Errorf("x-acemq-error %q, want %q", h0.Error(), want)
	}
}

func TestPublishSetsTheContentType(t *testing.T) {
	var p mqtest.Publisher
	if err := typed.Publish(context.Background(), &p, "order.placed", order{ID: "o-1", Total: 3}); err != nil {
		t.Fatal(err)
	}
	m := p.Messages()
	if len(m) != 1 || m[0].RoutingKey != "order.placed" || m[0].Message.ContentType != "application/json" ||
		string(m[0].Message.Body) != `{"id":"o-1","total":3}` {
		t.Fatalf("published %+v", m)
	}
	// A value that does not encode publishes nothing.
	if err := typed.Publish(context.Background(), &p, "k", func() {}); err == nil || !strings.Contains(err.Error(), "typed: encode func()") {
		t.Fatalf("Publish of a func: %v", err)
	}
	if len(p.Messages()) != 1 {
		t.Fatal("a value that does not encode was published")
	}
}

// upper is a codec of the test's own: the body is the string upper-cased.
type upper struct{}

func (upper) ContentType() string { return "text/x-upper" }
func (upper) Marshal(v any) ([]byte, error) {
	s, ok := v.(string)
	if !ok {
		return nil, errors.New("not a string")
	}
	return []byte(strings.ToUpper(s)), nil
}
func (upper) Unmarshal(b []byte, v any) error {
	if strings.ToUpper(string(b)) != string(b) {
		return errors.New("not upper case")
	}
	*(v.(*string)) = string(b)
	return nil
}

func TestPluggableCodec(t *testing.T) {
	var p mqtest.Publisher
	if err := typed.Publish(context.Background(), &p, "k", "hello", typed.WithCodec(upper{})); err != nil {
		t.Fatal(err)
	}
	m := p.Messages()[0].Message
	if m.ContentType != "text/x-upper" || string(m.Body) != "HELLO" {
		t.Fatalf("message %+v", m)
	}
	var got string
	c := mqtest.New(t, "q", typed.Handler(func(_ context.Context, _ *mq.Delivery, s string) error { got = s; return nil }, typed.WithCodec(upper{})), middleware.Standard(policy))
	if r := c.Deliver(m); r.Outcome != mq.OutcomeAck || got != "HELLO" {
		t.Fatalf("result %v, got %q", r, got)
	}
	if r := c.Deliver(mq.Message{Body: []byte("lower")}); r.Outcome != mq.OutcomeDeadLetter || r.Hops[0].Error() != "decode text/x-upper body: not upper case" {
		t.Fatalf("result %v", r)
	}
}
