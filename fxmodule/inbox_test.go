package fxmodule

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/fx"

	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/mqtest"
	"github.com/acemq/acemq-go/retry"
	"github.com/acemq/acemq-go/topology"
)

// trail is a middleware that notes name on each call, in order.
func trail(name string, got *[]string) mq.Middleware {
	return func(next mq.Handler) mq.Handler {
		return mq.HandlerFunc(func(ctx context.Context, d *mq.Delivery) error {
			*got = append(*got, name)
			return next.Handle(ctx, d)
		})
	}
}

// Consumer.Inbox runs the app's inbox (AsInbox) innermost, next to the
// handler: inside the shared middleware, inside Standard's ladder (each
// attempt goes through it) and inside the consumer's own Options.
func TestConsumerInboxSitsNextToTheHandler(t *testing.T) {
	var got []string
	c := Consumer{Queue: "orders", Standard: true, Inbox: true,
		Options: []mq.ConsumerOption{mq.WithMiddleware(trail("own", &got))},
		Handler: mq.HandlerFunc(func(context.Context, *mq.Delivery) error {
			got = append(got, "handler")
			return errors.New("fails")
		})}
	topo := topology.New().Queue("orders", topology.Retry(retry.Waits(time.Second)))
	opts, err := ConsumerOptions(c, topo, trail("inbox", &got), trail("shared", &got))
	if err != nil {
		t.Fatal(err)
	}
	r := mqtest.New(t, c.Queue, c.Handler, opts...).Deliver(mq.Message{MessageId: "m"})
	if r.Attempts != 2 {
		t.Fatalf("result %v, want 2 attempts", r)
	}
	if s := strings.Join(got, " "); s != "shared own inbox handler own inbox handler" {
		t.Errorf("trail %q, want the inbox next to the handler, inside the ladder and the consumer's own middleware", s)
	}
}

// A consumer with Inbox set in an app with no inbox fails the build,
// saying where the inbox comes from; ConsumerOptions, which has no app's
// inbox, refuses it the same way rather than run the handler without it.
func TestConsumerInboxNeedsAnInbox(t *testing.T) {
	app := fx.New(fx.NopLogger, fx.Supply(cfg()), Module, AsConsumer(func() Consumer {
		return Consumer{Queue: "orders", Inbox: true, Handler: noop}
	}))
	if err := app.Err(); err == nil || !strings.Contains(err.Error(), "Inbox") || !strings.Contains(err.Error(), "outbox.Module") {
		t.Errorf("fx.New: %v, want an error saying Inbox needs outbox.Module", err)
	}
	if _, err := ConsumerOptions(Consumer{Queue: "orders", Inbox: true, Handler: noop}, nil, nil); err == nil || !strings.Contains(err.Error(), "Inbox") {
		t.Errorf("ConsumerOptions: %v, want an error about Inbox", err)
	}
}

// With AsInbox in the app the consumer builds; a second AsInbox fails the
// build (one inbox per app).
func TestAsInbox(t *testing.T) {
	var got []string
	consumer := AsConsumer(func() Consumer { return Consumer{Queue: "orders", Inbox: true, Handler: noop} })
	if err := fx.New(fx.NopLogger, fx.Supply(cfg()), Module, consumer,
		AsInbox(func() mq.Middleware { return trail("inbox", &got) })).Err(); err != nil {
		t.Errorf("with AsInbox: %v", err)
	}
	if err := fx.New(fx.NopLogger, fx.Supply(cfg()), Module, consumer,
		AsInbox(func() mq.Middleware { return trail("a", &got) }),
		AsInbox(func() mq.Middleware { return trail("b", &got) })).Err(); err == nil {
		t.Errorf("two AsInbox: the app built")
	}
	if err := fx.New(fx.NopLogger, fx.Supply(cfg()), Module, AsInbox(42)).Err(); err == nil || !strings.Contains(err.Error(), "fxmodule.AsInbox") {
		t.Errorf("AsInbox(42): %v, want an fxmodule.AsInbox error", err)
	}
}
