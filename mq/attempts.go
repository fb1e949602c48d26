package mq

import (
	"context"
	"errors"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	amqp "github.com/rabbitmq/amqp091-go"
)

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

// AttemptOf reads the x-acemq-attempt header leniently: any integer type,
// a float, a decimal, or a number written as a string or bytes (as other
// languages may write it). Absent, unreadable or below 1 is 1; absurdly
// large values are capped at math.MaxInt32.
func AttemptOf(h amqp.Table) int {
	v, ok := h[HeaderAttempt]
	if !ok {
		return 1
	}
	n := int64(1)
	switch x := v.(type) {
	case int:
		n = int64(x)
	case int8:
		n = int64(x)
	case int16:
		n = int64(x)
	case int32:
		n = int64(x)
	case int64:
		n = x
	case uint8:
		n = int64(x)
	case uint16:
		n = int64(x)
	case uint32:
		n = int64(x)
	case uint:
		n = int64(min(x, math.MaxInt32))
	case uint64:
		n = int64(min(x, math.MaxInt32))
	case float32:
		n = floatAttempt(float64(x))
	case float64:
		n = floatAttempt(x)
	case amqp.Decimal:
		f := float64(x.Value)
		for i := uint8(0); i < x.Scale && i < 20; i++ {
			f /= 10
		}
		n = floatAttempt(f)
	case string:
		n = stringAttempt(x)
	case []byte:
		if len(x) <= 32 {
			n = stringAttempt(string(x))
		}
	}
	return int(max(1, min(n, math.MaxInt32)))
}

// AttemptValue is attempt n as the library writes HeaderAttempt: a signed
// 32-bit integer, the AMQP integer every client library reads, capped at
// math.MaxInt32. AttemptOf reads it back as n.
func AttemptValue(n int) int32 {
	return int32(min(n, math.MaxInt32))
}

func floatAttempt(f float64) int64 {
	if math.IsNaN(f) || f < 1 {
		return 1
	}
	if f > math.MaxInt32 {
		return math.MaxInt32
	}
	return int64(f)
}

func stringAttempt(s string) int64 {
	s = strings.TrimSpace(s)
	if len(s) > 32 {
		return 1
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return n
	}
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		return floatAttempt(f)
	}
	return 1
}

// attemptHandler sits between the middleware and the application's
// handler: it numbers attempts (every call after the first is the next
// attempt of the same delivery) and runs the AttemptHooks.
type attemptHandler struct {
	next  Handler
	hooks []AttemptHook
}

func (a *attemptHandler) Handle(ctx context.Context, d *Delivery) (err error) {
	if d.calls > 0 {
		d.attempt++
	}
	d.calls++
	if len(a.hooks) == 0 {
		err = a.next.Handle(ctx, d)
		endAttempt(d, err)
		return err
	}
	for _, h := range a.hooks {
		ctx = h.OnAttempt(ctx, d)
	}
	defer func() {
		if r := recover(); r != nil {
			endAttempt(d, errPanicked)
			pe := NewPanicError(r)
			for i := len(a.hooks) - 1; i >= 0; i-- {
				a.hooks[i].OnAttemptDone(ctx, d, pe)
			}
			panic(r)
		}
	}()
	err = a.next.Handle(ctx, d)
	endAttempt(d, err)
	for i := len(a.hooks) - 1; i >= 0; i-- {
		a.hooks[i].OnAttemptDone(ctx, d, err)
	}
	return err
}

// endAttempt notes that the attempt the handler just returned from counts as
// used — unless the consumer cut it short (lost channel, stop deadline):
// then its redelivery is the same attempt again.
//
// It is also where a success becomes the ack outcome, so the middleware
// around the handler reads OutcomeAck before the runtime settles.
func endAttempt(d *Delivery, err error) {
	if !d.runtime().cutShort() {
		d.used = d.attempt
	}
	if err == nil && d.outcome == "" {
		d.outcome = OutcomeAck
	}
}

// errPanicked stands for the error of an attempt that panicked.
var errPanicked = errors.New("mq: the handler panicked")
