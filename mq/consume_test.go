package mq_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq-go/mq"
)

var nopHandler = mq.HandlerFunc(func(context.Context, *mq.Delivery) error { return nil })

func TestConsumeRefusesBadOptions(t *testing.T) {
	b := mq.New(mq.Config{URLs: []string{"amqp://guest:guest@127.0.0.1:1/"}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	cases := []struct {
		name  string
		queue string
		h     mq.Handler
		opts  []mq.ConsumerOption
		want  []string
	}{
		{"prefetch 0", "q", nopHandler, []mq.ConsumerOption{mq.WithPrefetch(0)}, []string{"WithPrefetch(0)"}},
		{"concurrency 0", "q", nopHandler, []mq.ConsumerOption{mq.WithConcurrency(0)}, []string{"WithConcurrency(0)"}},
		{"prefetch below concurrency", "q", nopHandler, []mq.ConsumerOption{mq.WithPrefetch(2), mq.WithConcurrency(4)}, []string{"prefetch 2 is below the concurrency 4"}},
		{"empty queue and nil handler", "", nil, nil, []string{"queue name is empty", "handler is nil"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cons, err := b.Consume(ctx, c.queue, c.h, c.opts...)
			if err == nil {
				_ = cons.Stop(ctx)
				t.Fatal("Consume accepted bad options")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

func TestConsumeBeforeStartFailsFast(t *testing.T) {
	b := mq.New(mq.Config{URLs: []string{"amqp://guest:guest@127.0.0.1:1/"}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	start := time.Now()
	_, err := b.Consume(ctx, "orders", nopHandler, mq.WithConcurrency(4))
	if !errors.Is(err, mq.ErrNotReady) {
		t.Fatalf("Consume on a broker not started = %v, want ErrNotReady (not started)", err)
	}
	if !strings.Contains(err.Error(), `"orders"`) {
		t.Errorf("error %q does not name the queue", err)
	}
	if time.Since(start) > 500*time.Millisecond {
		t.Errorf("took %v: must fail fast", time.Since(start))
	}
	if err := b.Close(ctx); err != nil {
		t.Errorf("Close: %v", err)
	}
	if _, err := b.Consume(ctx, "orders", nopHandler); !errors.Is(err, mq.ErrClosed) {
		t.Errorf("Consume after Close = %v, want ErrClosed", err)
	}
}
