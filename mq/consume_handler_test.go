package mq_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/mqtest"
)

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

func TestChainSkipsNilMiddleware(t *testing.T) {
	var subscribes int
	counting := func(next mq.Handler) mq.Handler { return &subscribeCounter{next, &subscribes} }
	b := mq.New(mq.Config{URLs: []string{"amqp://127.0.0.1:1/"}})
	_, err := b.Consume(context.Background(), "q", mq.HandlerFunc(func(context.Context, *mq.Delivery) error { return nil }),
		mq.WithMiddleware(nil, counting, nil))
	if !errors.Is(err, mq.ErrNotReady) {
		t.Fatalf("Consume on a broker never started: %v, want ErrNotReady", err)
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
