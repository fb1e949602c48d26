package mq

import (
	"context"
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// ErrWaitCut is what Delivery.Wait returns when the wait was cut short:
// the consumer is stopping, the delivery's channel was lost, or ctx ended.
var ErrWaitCut = errors.New("mq: in-process wait cut short")

// Wait waits w before the delivery's next attempt, in-process, without
// holding a worker: while it waits, the delivery stays unacknowledged on
// its channel and its worker goes on with the rest of the queue (unless
// the consumer runs InOrder, or WithMaxWaiting deliveries wait already).
// It returns nil when the wait is over and a worker is free for the next
// attempt, or ErrWaitCut at once when the consumer stops, the channel is
// lost or ctx ends. This is how the retry ladder waits; outside a consumer
// it simply sleeps.
func (d *Delivery) Wait(ctx context.Context, w time.Duration) error {
	switch {
	case d.wait != nil:
		return d.wait(ctx, w)
	case d.c == nil || d.sub == nil:
		return waitFor(ctx, nil, w)
	}
	return d.c.wait(ctx, d, w)
}

// headerDeliveryCount is the header a quorum queue puts on a redelivered
// message: how many times this copy was returned to the queue (from
// RabbitMQ 4.3 on, the returns that say it failed: a basic.reject, or a
// channel or connection that closed holding it; a basic.nack with requeue
// is not counted).
const headerDeliveryCount = "x-delivery-count"

// deliveryCount reads x-delivery-count, which RabbitMQ writes as a long.
func deliveryCount(h amqp.Table) (int, bool) {
	switch v := h[headerDeliveryCount].(type) {
	case int64:
		return int(max(0, min(v, math.MaxInt32))), true
	case int32:
		return int(max(0, v)), true
	case int:
		return max(0, min(v, math.MaxInt32)), true
	}
	return 0, false
}

// attemptMemo remembers, per message id, the attempt a message returned to
// its queue by the consumer itself must resume at (a wait cut short by a
// lost channel, a failed hop): the broker redelivers the copy with its old
// x-acemq-attempt, and without the memo the count would start again. It
// lives as long as the Consumer, across resubscribes; it is bounded, the
// oldest entries going first.
type attemptMemo struct {
	size atomic.Int32 // len(next), read without the lock on every delivery
	mu   sync.Mutex
	next map[string]int
	fifo []string
	head int
}

// memoSize bounds the memo: a consumer that has this many messages in
// flight between a return and its redelivery forgets the oldest.
const memoSize = 4096

// returnGrace is how many returns of a copy the broker may count
// (x-delivery-count) before each further one counts as an attempt used. A
// lost connection or a stop returns every delivery in the consumer's window,
// most of them never started, so the first returns say nothing about the
// message; a message that keeps coming back (its process dies in every
// wait, or on it) still reaches .dlq, after at most returnGrace extra
// deliveries.
const returnGrace = 2

// attempt is the attempt number a delivery is: the x-acemq-attempt it
// carries, plus the returns of the copy the broker counts (quorum queues:
// x-delivery-count) past returnGrace, and never less than what this
// consumer remembers of it.
func (m *attemptMemo) attempt(raw amqp.Delivery) int {
	a := AttemptOf(raw.Headers)
	if n, ok := deliveryCount(raw.Headers); ok && n > returnGrace {
		a = int(min(int64(a)+int64(n-returnGrace), math.MaxInt32))
	}
	if m.size.Load() == 0 || raw.MessageId == "" {
		return a
	}
	m.mu.Lock()
	r := m.next[raw.MessageId]
	m.mu.Unlock()
	return max(a, r)
}

// remember records that d's next delivery is the attempt after the last
// one it used to the end.
func (m *attemptMemo) remember(d *Delivery) {
	if d.MessageId == "" || d.used == 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.next == nil {
		m.next = make(map[string]int)
		m.fifo = make([]string, 0, 64)
	}
	if _, ok := m.next[d.MessageId]; !ok {
		if len(m.fifo) < memoSize {
			m.fifo = append(m.fifo, d.MessageId)
		} else {
			delete(m.next, m.fifo[m.head])
			m.fifo[m.head] = d.MessageId
			m.head = (m.head + 1) % memoSize
		}
	}
	m.next[d.MessageId] = max(m.next[d.MessageId], d.used+1)
	m.size.Store(int32(len(m.next)))
}

// forget drops d once it is settled for good. Its id stays in the FIFO
// until it is overwritten, which costs nothing but a slot.
func (m *attemptMemo) forget(d *Delivery) {
	if m.size.Load() == 0 || d.MessageId == "" {
		return
	}
	m.mu.Lock()
	delete(m.next, d.MessageId)
	m.size.Store(int32(len(m.next)))
	m.mu.Unlock()
}
