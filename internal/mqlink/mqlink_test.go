package mqlink_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/internal/mqlink"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/retry"
)

// Every function mq lends through package link is set, of the type this
// package reads it as (a wrong one panics here, not in mqtest or ops), and
// does what mq does with it.
func TestEveryLinkIsSetAndTyped(t *testing.T) {
	if err := mqlink.CheckName("queue name", strings.Repeat("q", mqlink.MaxShortString+1)); !errors.Is(err, mq.ErrInvalid) {
		t.Errorf("CheckName of %d bytes = %v, want ErrInvalid", mqlink.MaxShortString+1, err)
	}
	if err := mqlink.CheckName("queue name", strings.Repeat("q", mqlink.MaxShortString)); err != nil {
		t.Errorf("CheckName of %d bytes = %v", mqlink.MaxShortString, err)
	}
	if err := mqlink.CheckTable("header", amqp.Table{"n": uint64(1)}); !errors.Is(err, mq.ErrInvalid) {
		t.Errorf("CheckTable(uint64) = %v, want ErrInvalid", err)
	}
	if err := mqlink.CheckPublish("", "k", mq.Message{MessageId: strings.Repeat("m", 300)}); !errors.Is(err, mq.ErrInvalid) {
		t.Errorf("CheckPublish(300-byte id) = %v, want ErrInvalid", err)
	}
	if got := mqlink.ErrorText(errors.New(strings.Repeat("e", 5000))); len(got) != mqlink.MaxErrorHeader {
		t.Errorf("ErrorText of 5000 bytes has %d, want %d", len(got), mqlink.MaxErrorHeader)
	}
	if got := mqlink.Redact("amqp://ann:s3cret@broker:5672/"); strings.Contains(got, "s3cret") || !strings.Contains(got, "broker") {
		t.Errorf("Redact = %q", got)
	}
	if got := mqlink.AttemptOf(amqp.Table{mq.HeaderAttempt: int32(3)}); got != 3 {
		t.Errorf("AttemptOf = %d, want 3", got)
	}
	m := mqlink.MessageOf(amqp.Delivery{MessageId: "id-1", Body: []byte("b"), Headers: amqp.Table{"x-delivery-count": int64(3), "k": "v"}})
	if m.MessageId != "id-1" || string(m.Body) != "b" || m.Headers["k"] != "v" || m.Headers["x-delivery-count"] != nil {
		t.Errorf("MessageOf = %+v", m)
	}
	if !mqlink.IsMandatory(mqlink.AsHop(mq.OutcomeReplay)) || mqlink.IsMandatory(mq.AllowUnroutable()) {
		t.Error("IsMandatory: AsHop is not mandatory, or AllowUnroutable is")
	}
	if p := mqlink.RetryPolicy(&mq.Subscription{Queue: "q"}); !p.Equal(retry.Policy{}) {
		t.Errorf("RetryPolicy of a bare subscription = %v, want the zero policy", p)
	}

	r, err := mqlink.NewRunner(mq.HandlerFunc(func(context.Context, *mq.Delivery) error { return nil }), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := r.RetryPolicy(); ok {
		t.Error("a runner with no middleware runs a policy")
	}
	d := mqlink.NewDelivery("q", amqp.Delivery{MessageId: "id-2", Headers: amqp.Table{mq.HeaderAttempt: int32(2)}}, nil)
	if d.Queue() != "q" || d.Attempt() != 2 {
		t.Errorf("NewDelivery: queue %q attempt %d", d.Queue(), d.Attempt())
	}
	if err := r.Deliver(context.Background(), d); err != nil || d.Outcome() != mq.OutcomeAck {
		t.Errorf("Deliver = %v, outcome %q; want nil, ack", err, d.Outcome())
	}
}
