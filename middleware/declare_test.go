package middleware

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/acemq/acemq-go/mq"
)

func TestDeclareOnStartFailsFirstSubscribeButNotResubscribe(t *testing.T) {
	// A broker that was never started: every declaration fails.
	b := mq.New(mq.Config{URLs: []string{"amqp://guest:guest@127.0.0.1:1/"}})
	h := DeclareOnStart()(mq.HandlerFunc(func(context.Context, *mq.Delivery) error { return nil }))
	sub, ok := h.(mq.Subscriber)
	if !ok {
		t.Fatal("DeclareOnStart's handler is not an mq.Subscriber")
	}
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))

	err := sub.Subscribe(context.Background(), &mq.Subscription{Queue: "orders", Broker: b, Logger: log})
	if !errors.Is(err, mq.ErrNotReady) {
		t.Fatalf("first subscribe: err = %v, want ErrNotReady (not started)", err)
	}
	if buf.Len() != 0 {
		t.Errorf("first subscribe logged %q: the error is returned, not logged", buf.String())
	}

	err = sub.Subscribe(context.Background(), &mq.Subscription{Queue: "orders", Broker: b, Logger: log, Resubscribe: true})
	if err != nil {
		t.Fatalf("resubscribe: err = %v, want nil (logged instead)", err)
	}
	if !strings.Contains(buf.String(), "acemq.declare.failed") {
		t.Errorf("resubscribe did not log acemq.declare.failed: %q", buf.String())
	}
}
