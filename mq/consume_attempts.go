package mq

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

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

// attemptMemo remembers the attempt a copy returned to its queue by the
// consumer itself must resume at (a wait cut short by a lost channel, a
// failed hop): the broker redelivers the copy with its old
// x-acemq-attempt, and without the memo the count would start again. It
// lives as long as the Consumer, across resubscribes.
//
// An entry describes one copy, and only its next delivery reads it:
//   - only a redelivered delivery reads the memo (a fresh message that
//     shares the id of one returned earlier is a message of its own);
//   - the copy must match the one returned (copyMark: the attempt it
//     carried, a replay's stamp, its timestamp and size);
//   - the first redelivery of the id takes the entry, whether it matched
//     or not (another replica may have taken the copy meanwhile, and what
//     comes back later is another copy), and one older than memoAge is
//     ignored;
//   - past memoSize entries the oldest goes.
//
// It also remembers a fate carried out (a confirmed hop: rememberHop),
// on the same terms: the consumer sends acks together, up to leftDelay
// after the settle, and a channel lost before then makes the broker
// redeliver the original, whose handler must not run again. Such an entry
// is read only if the channel the original came on was lost
// (lane.acksMayBeLost): while it is open, or once closed cleanly, the
// broker holds or took the ack, and a redelivery of the id is another
// message.
type attemptMemo struct {
	size  atomic.Int32 // len(byID), read without the lock on every delivery
	mu    sync.Mutex
	byID  map[string]*list.Element // of *memoEntry
	order list.List                // oldest first
}

type memoEntry struct {
	id   string
	next int      // the attempt the redelivery resumes at
	mark copyMark // the copy returned
	at   time.Time
	// aside: the copy's attempts were used and its set-aside failed; its
	// redelivery makes the set-aside again instead of another attempt. Or
	// (aside.done) its hop was confirmed, and its redelivery reads the fate
	// carried out, if it comes because the ack was lost with lane.
	aside *asideRetry
	lane  *lane // the channel the hop's original came on (rememberHop)
}

// copyMark is what tells one copy of a message from another with the
// same id: the attempt it carried, the stamp a replay puts on it, its
// timestamp and the size of its body.
type copyMark struct {
	attempt  int
	replayed string
	stamp    time.Time
	size     int
}

func markOf(raw *amqp.Delivery) copyMark {
	m := copyMark{attempt: AttemptOf(raw.Headers), stamp: raw.Timestamp, size: len(raw.Body)}
	if v, ok := raw.Headers[HeaderReplayedAt]; ok {
		m.replayed = fmt.Sprint(v)
	}
	return m
}

// memoSize bounds the memo: a consumer that has this many copies returned
// and not yet redelivered forgets the oldest.
const memoSize = 4096

// memoAge is how long an entry waits for its redelivery; one that comes
// later (or never: another replica took it) reads its headers alone.
const memoAge = 10 * time.Minute

// returnGrace is how many returns of a copy the broker may count
// (x-delivery-count) before each further one counts as an attempt used. A
// lost connection or a stop returns every delivery in the consumer's window,
// most of them never started, so the first returns say nothing about the
// message; a message that keeps coming back (its process dies in every
// wait, or on it) still reaches .dlq, after at most returnGrace extra
// deliveries.
const returnGrace = 2

// recall is the attempt number a delivery is: the x-acemq-attempt it
// carries, plus the returns of the copy the broker counts (quorum queues:
// x-delivery-count) past returnGrace, and, for a redelivery of the copy
// this consumer returned, never less than what it remembers of it. With
// it, the set-aside the copy's redelivery must make again (nil: none): a
// copy whose set-aside failed is not handled again, and its attempt stays
// the one that used the last (the set-aside writes the next, as the first
// try did).
func (m *attemptMemo) recall(raw amqp.Delivery) (int, *asideRetry) {
	a := AttemptOf(raw.Headers)
	if n, ok := deliveryCount(raw.Headers); ok && n > returnGrace {
		a = int(min(int64(a)+int64(n-returnGrace), math.MaxInt32))
	}
	if !raw.Redelivered || m.size.Load() == 0 || raw.MessageId == "" {
		return a, nil
	}
	m.mu.Lock()
	el := m.byID[raw.MessageId]
	if el == nil {
		m.mu.Unlock()
		return a, nil
	}
	e := m.dropLocked(el)
	m.mu.Unlock()
	if e.mark != markOf(&raw) || time.Since(e.at) > memoAge {
		return a, nil
	}
	if e.lane != nil && !e.lane.acksMayBeLost() {
		// The hop's original was acknowledged on a channel that is open,
		// or was closed after the broker took its acks: this is another
		// message with the id.
		return a, nil
	}
	if e.aside != nil {
		return e.next, e.aside
	}
	return max(a, e.next), nil
}

// remember records, as d goes back to its queue, the attempt its
// redelivery resumes at: the one after the last it used to the end, or
// the same one if the consumer cut it short; for a copy whose set-aside
// failed, the attempt that decided it and the set-aside to make again. It
// replaces what was remembered of the id before.
func (m *attemptMemo) remember(d *Delivery) {
	raw := d.raw()
	next := max(d.used+1, d.attempt)
	if d.aside != nil {
		next = d.attempt
	}
	if d.MessageId == "" || (d.aside == nil && next <= AttemptOf(raw.Headers)) {
		return
	}
	m.put(&memoEntry{id: d.MessageId, next: next, mark: markOf(&raw), at: time.Now(), aside: d.aside})
}

// rememberHop records, as d's fate is carried out (a confirmed hop: a
// rung, a carry, .dlq, .parked, or a refused hop's copy in its own queue)
// by the carrier at place at (see carrier), that fate, for a redelivery
// of the original should its ack not reach the broker: that redelivery
// passes the middleware outside that carrier, reads the same outcome and
// attempt, and is acknowledged, the handler not called again. A hop is a
// failure path: a plain ack remembers nothing.
func (m *attemptMemo) rememberHop(d *Delivery, at int) {
	if d.MessageId == "" || d.lane == nil {
		return
	}
	m.put(&memoEntry{id: d.MessageId, next: d.attempt, mark: markOf(new(d.raw())), at: time.Now(),
		lane: d.lane, aside: &asideRetry{outcome: d.outcome, cause: d.cause, at: at, done: true}})
}

// put adds e, replacing what was remembered of its id, and drops the
// oldest entries past memoSize or memoAge.
func (m *attemptMemo) put(e *memoEntry) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.byID == nil {
		m.byID = make(map[string]*list.Element)
	}
	if el := m.byID[e.id]; el != nil {
		m.dropLocked(el)
	}
	for m.order.Len() > 0 && (m.order.Len() >= memoSize || e.at.Sub(m.order.Front().Value.(*memoEntry).at) > memoAge) {
		m.dropLocked(m.order.Front())
	}
	m.byID[e.id] = m.order.PushBack(e)
	m.size.Store(int32(len(m.byID)))
}

func (m *attemptMemo) dropLocked(el *list.Element) *memoEntry {
	e := m.order.Remove(el).(*memoEntry)
	delete(m.byID, e.id)
	m.size.Store(int32(len(m.byID)))
	return e
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

// attemptValue is attempt n as the library writes HeaderAttempt: a signed
// 32-bit integer, the AMQP integer every client library reads, capped at
// math.MaxInt32. AttemptOf reads it back as n.
func attemptValue(n int) int32 {
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
	if !d.carriedOut() {
		d.outcome, d.cause = "", nil // what the last attempt came to is not this one's
	}
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
			pe := newPanicError(r)
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
	if cr := d.consumer(); cr == nil || !cr.cutShort() {
		d.used = d.attempt
	}
	if err == nil && d.outcome == "" {
		d.outcome = OutcomeAck
	}
}

// errPanicked stands for the error of an attempt that panicked.
var errPanicked = errors.New("mq: the handler panicked")
