package main

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// hungGetter is a channel whose basic.get never answers (a quorum queue
// whose leader is gone and whose members do not elect another): Get
// returns only once the channel is closed.
type hungGetter struct {
	once   sync.Once
	closed chan struct{}
}

func (g *hungGetter) Get(string, bool) (amqp.Delivery, bool, error) {
	<-g.closed
	return amqp.Delivery{}, false, amqp.ErrClosed
}

func (g *hungGetter) Close() error {
	g.once.Do(func() { close(g.closed) })
	return nil
}

// The checker drains every queue of the run with basic.get, which
// amqp091-go does not bound: a get that never answers must end with the
// drain's context, not hang the checker (and the verdict) for ever.
func TestDrainEndsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	g := &hungGetter{closed: make(chan struct{})}
	done := make(chan error, 1)
	go func() {
		_, err := drainFrom(ctx, g, "field.orders")
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("drain of a queue that never answers ended with %v, want its context's deadline", err)
		}
	case <-time.After(10 * time.Second):
		_ = g.Close()
		t.Fatal("drain of a queue that never answers was still waiting 10 s after its 200 ms context ended")
	}
}

// fakeQueue answers basic.get from its messages, then empty.
type fakeQueue struct{ ids []string }

func (q *fakeQueue) Get(string, bool) (amqp.Delivery, bool, error) {
	if len(q.ids) == 0 {
		return amqp.Delivery{}, false, nil
	}
	d := amqp.Delivery{MessageId: q.ids[0], Acknowledger: noAck{}}
	q.ids = q.ids[1:]
	return d, true, nil
}

func (q *fakeQueue) Close() error { return nil }

type noAck struct{}

func (noAck) Ack(uint64, bool) error        { return nil }
func (noAck) Nack(uint64, bool, bool) error { return nil }
func (noAck) Reject(uint64, bool) error     { return nil }

// A queue that answers is drained to the end, every message id in order.
func TestDrainTakesEveryMessage(t *testing.T) {
	ids, err := drainFrom(context.Background(), &fakeQueue{ids: []string{"a", "b", "c"}}, "q")
	if err != nil || len(ids) != 3 || ids[0] != "a" || ids[2] != "c" {
		t.Fatalf("drain: %v, %v; want [a b c], nil", ids, err)
	}
}
