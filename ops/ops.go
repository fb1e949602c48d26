package ops

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/topology"
)

// QueueCount is what Count found for one queue.
type QueueCount struct {
	// Queue is the queue's name.
	Queue string
	// Exists is false when the broker has no such queue; the counts are
	// then zero.
	Exists bool
	// Ready is the number of messages ready for delivery. Messages a
	// consumer holds unacknowledged are not counted.
	Ready int
	// Consumers is the number of consumers subscribed to the queue.
	Consumers int
}

// Count reports how many messages are ready in each queue, and how many
// consumers each has, in the order given. A queue that does not exist is
// reported with Exists false, not as an error; any other failure stops the
// count and is returned with the counts made so far.
func Count(ctx context.Context, b *mq.Broker, queues ...string) ([]QueueCount, error) {
	out := make([]QueueCount, 0, len(queues))
	for _, q := range queues {
		c := QueueCount{Queue: q}
		info, err := inspect(ctx, b, q)
		switch {
		case err == nil:
			c.Exists, c.Ready, c.Consumers = true, info.Messages, info.Consumers
		case errors.Is(err, mq.ErrNotFound):
		default:
			return out, err
		}
		out = append(out, c)
	}
	return out, nil
}

// inspect passively declares q on a channel of its own (a NOT_FOUND kills
// the channel it comes on).
func inspect(ctx context.Context, b *mq.Broker, q string) (amqp.Queue, error) {
	if q == "" {
		return amqp.Queue{}, errors.New("ops: the queue name is empty")
	}
	if err := checkQueue(q); err != nil {
		return amqp.Queue{}, err
	}
	ch, err := b.Channel(ctx)
	if err != nil {
		return amqp.Queue{}, fmt.Errorf("ops: inspect queue %q: %w", q, err)
	}
	defer closeChannel(ctx, ch)
	var info amqp.Queue
	err = call(ctx, func() (err error) {
		info, err = ch.QueueDeclarePassive(q, false, false, false, false, nil)
		return err
	})
	if ctx.Err() != nil && err == ctx.Err() {
		return amqp.Queue{}, fmt.Errorf("ops: inspect queue %q: %w", q, err)
	}
	if err != nil {
		return amqp.Queue{}, refusal(fmt.Sprintf("inspect queue %q", q), err)
	}
	return info, nil
}

// checkQueue refuses a queue name the wire cannot carry (over 255 bytes)
// before a raw channel sends it: mq's validator checks it as what it is on
// the default exchange, a routing key. The error matches mq.ErrInvalid.
func checkQueue(q string) error {
	err := mq.CheckPublish("", q, mq.Message{})
	if err == nil {
		return nil
	}
	if inner := errors.Unwrap(err); inner != nil {
		err = inner // "mq: invalid routing key: is 300 bytes, at most 255", without the 300 bytes
	}
	return fmt.Errorf("ops: invalid queue name (a routing key on the default exchange): %w", err)
}

// refusal lifts an *amqp.Error into an *mq.BrokerError, so errors.Is
// matches mq.ErrNotFound and the other sentinels by reply code.
func refusal(op string, err error) error {
	var ae *amqp.Error
	if errors.As(err, &ae) && ae.Server {
		return &mq.BrokerError{Op: op, Code: ae.Code, Reason: ae.Reason, Err: err}
	}
	return &mq.BrokerError{Op: op, Err: err}
}

// get is basic.get without auto-ack, bounded by ctx: when ctx ends the
// channel is closed, and with it everything it took goes back to the queue.
func get(ctx context.Context, ch *amqp.Channel, q string) (amqp.Delivery, bool, error) {
	var d amqp.Delivery
	var ok bool
	err := call(ctx, func() (err error) {
		d, ok, err = ch.Get(q, false)
		return err
	})
	if ctx.Err() != nil && err == ctx.Err() {
		return amqp.Delivery{}, false, err
	}
	if err != nil {
		return amqp.Delivery{}, false, refusal(fmt.Sprintf("get from queue %q", q), err)
	}
	return d, ok, nil
}

// PreviewBytes is how much of a body Peeked.Preview shows.
const PreviewBytes = 256

// Peeked is one message as Peek saw it: its properties, the contract's
// headers read leniently (another AceMQ library may have written them),
// every header, and the body.
type Peeked struct {
	// Queue is the queue peeked at; Position counts from 1 at its head.
	Queue    string
	Position int

	MessageId     string
	CorrelationId string
	ContentType   string
	Type          string
	AppId         string
	Timestamp     time.Time // zero when the message has none
	RoutingKey    string    // the key it was last published with
	Redelivered   bool

	// Attempt is the x-acemq-attempt header read as mq.AttemptOf reads it:
	// the attempt its next delivery will be (absent: 1).
	Attempt int
	// Reason is x-acemq-reason: exhausted, rejected, parked, rung-missing.
	Reason string
	// Error is x-acemq-error, the handler's error text.
	Error string
	// FailedAt is x-acemq-failed-at; zero when absent or unreadable.
	FailedAt time.Time
	// SourceQueue is x-acemq-source-queue, the queue the message failed on.
	SourceQueue string
	// ReplayedAt and ReplayedFrom record the last replay, if any.
	ReplayedAt   time.Time
	ReplayedFrom string

	// AttemptsUsed is how many attempts the message has had:
	// x-acemq-attempt − 1, since on a .dlq or .parked the header is the
	// attempt its next delivery would be. It is -1, unknown, when the
	// message carries no x-acemq-attempt (the broker dead-lettered it, or it
	// never went through a ladder).
	AttemptsUsed int
	// OriginalExchange and OriginalRoutingKey are the message's first
	// route: the x-acemq-original-* headers a hop wrote, else the oldest
	// x-death record the broker wrote, else the delivery's own. RouteFrom
	// says which of the three.
	OriginalExchange, OriginalRoutingKey, RouteFrom string
	// DeliveryCounted is set when the message carries a quorum queue's
	// mark: x-delivery-count, or x-acquired-count (RabbitMQ 4.3 and later,
	// which count every return there and only failed ones in
	// x-delivery-count, so a message only ever given back by a nack, as a
	// look gives it, carries just x-acquired-count). Up to 4.2 taking it to
	// look counted toward the queue's delivery limit.
	DeliveryCounted bool
	// LastRung is the last rung the message waited in, classic or durable:
	// the newest rung the broker's x-death records name; empty when none.
	LastRung string

	// Headers are all the message's headers (a copy).
	Headers amqp.Table
	// Body is the whole body; Preview its first PreviewBytes as printable
	// text (see Preview).
	Body    []byte
	Preview string
}

// holding is a channel of an ops function's own on which it takes
// messages without acknowledging them: what it keeps is given back at the
// end, in place.
type holding struct {
	ctx  context.Context // bounds the wait for the channel's close
	ch   *amqp.Channel
	last uint64 // the highest delivery tag kept (0: none)
}

// keep notes that the delivery tagged tag stays held until the end.
func (h *holding) keep(tag uint64) { h.last = max(h.last, tag) }

// close gives back everything held with one basic.nack (multiple, with
// requeue), then closes the channel. The close alone would return them too,
// but RabbitMQ 4.3 and later count a return by a closed channel toward a
// quorum queue's delivery limit (x-delivery-count), and a nack with requeue
// they do not: so a look at a queue does not bring its messages nearer
// their limit. A nack that fails (a dead channel) has been overtaken by the
// broker's own return. The close waits for the broker while the call's
// context lasts (see call).
func (h *holding) close() {
	if h.last > 0 {
		_ = h.ch.Nack(h.last, true, true)
	}
	closeChannel(h.ctx, h.ch)
}

// Peek shows up to n messages from the head of queue without taking them:
// it gets them without acknowledging, then gives them back (basic.nack with
// requeue) to where they were. They come back marked
// redelivered; while Peek holds them, the queue's consumers do not get
// them. Fewer than n are returned when the queue holds fewer.
// errors.Is(err, mq.ErrNotFound) when the queue does not exist.
func Peek(ctx context.Context, b *mq.Broker, queue string, n int) ([]Peeked, error) {
	if queue == "" {
		return nil, errors.New("ops: peek: the queue name is empty")
	}
	if n < 1 {
		return nil, fmt.Errorf("ops: peek %q: n is %d, must be at least 1", queue, n)
	}
	if err := checkQueue(queue); err != nil {
		return nil, fmt.Errorf("ops: peek: %w", err)
	}
	return peek(ctx, b, queue, n, math.MaxInt, Filter{})
}

// peek looks at up to upto messages from the head of queue, on a channel
// of its own, and returns the first n of them that f matches, each with its
// position; every message taken goes back in place at the end.
func peek(ctx context.Context, b *mq.Broker, queue string, n, upto int, f Filter) ([]Peeked, error) {
	ch, err := b.Channel(ctx)
	if err != nil {
		return nil, fmt.Errorf("ops: peek %q: %w", queue, err)
	}
	h := &holding{ctx: ctx, ch: ch}
	defer h.close() // returns every message taken, in place
	var out []Peeked
	for pos := 1; pos <= upto && len(out) < n; pos++ {
		d, ok, err := get(ctx, ch, queue)
		if err != nil {
			return out, fmt.Errorf("ops: peek %q: %w", queue, err)
		}
		if !ok {
			break
		}
		h.keep(d.DeliveryTag)
		if p := peeked(queue, pos, d); f.Match(p) {
			out = append(out, p)
		}
	}
	return out, nil
}

func peeked(queue string, pos int, d amqp.Delivery) Peeked {
	h := d.Headers
	p := Peeked{
		Queue: queue, Position: pos,
		MessageId: d.MessageId, CorrelationId: d.CorrelationId, ContentType: d.ContentType,
		Type: d.Type, AppId: d.AppId, Timestamp: d.Timestamp, RoutingKey: d.RoutingKey,
		Redelivered: d.Redelivered,
		Attempt:     mq.AttemptOf(h),
		Body:        d.Body,
		Preview:     Preview(d.Body, PreviewBytes),
	}
	p.Reason, _ = headerString(h, mq.HeaderReason)
	p.Error, _ = headerString(h, mq.HeaderError)
	p.SourceQueue, _ = headerString(h, mq.HeaderSourceQueue)
	p.ReplayedFrom, _ = headerString(h, mq.HeaderReplayedFrom)
	p.FailedAt = headerTime(h, mq.HeaderFailedAt)
	p.ReplayedAt = headerTime(h, mq.HeaderReplayedAt)
	p.AttemptsUsed = -1
	if _, ok := h[mq.HeaderAttempt]; ok {
		p.AttemptsUsed = max(p.Attempt-1, 0)
	}
	ex, okEx := headerString(h, mq.HeaderOriginalExchange)
	rk, okKey := headerString(h, mq.HeaderOriginalRoutingKey)
	switch {
	case okEx || okKey:
		p.OriginalExchange, p.OriginalRoutingKey, p.RouteFrom = ex, rk, routeFromHeaders
	case deathRoute(h, &p.OriginalExchange, &p.OriginalRoutingKey):
		p.RouteFrom = routeFromDeath
	default:
		p.OriginalExchange, p.OriginalRoutingKey, p.RouteFrom = d.Exchange, d.RoutingKey, routeFromDelivery
	}
	p.DeliveryCounted = deliveryCounted(h)
	p.LastRung = lastRung(h)
	if h != nil {
		p.Headers = make(amqp.Table, len(h))
		for k, v := range h {
			p.Headers[k] = v
		}
	}
	return p
}

// The three places Peeked.RouteFrom names, in words.
const (
	routeFromHeaders  = "x-acemq-original-exchange / -routing-key"
	routeFromDeath    = "x-death (the broker's record)"
	routeFromDelivery = "the delivery's own"
)

// deathRoute reads the oldest x-death entry's exchange and first routing
// key (RabbitMQ lists the newest first).
func deathRoute(h amqp.Table, ex, key *string) bool {
	deaths, ok := h["x-death"].([]any)
	if !ok || len(deaths) == 0 {
		return false
	}
	last, ok := deaths[len(deaths)-1].(amqp.Table)
	if !ok {
		return false
	}
	*ex, _ = headerString(last, "exchange")
	if keys, ok := last["routing-keys"].([]any); ok && len(keys) > 0 {
		switch k := keys[0].(type) {
		case string:
			*key = k
		case []byte:
			*key = string(k)
		}
	}
	return true
}

// lastRung is the newest queue in x-death (RabbitMQ lists the newest
// first) that topology.ParseRung reads as a rung.
func lastRung(h amqp.Table) string {
	deaths, _ := h["x-death"].([]any)
	for _, d := range deaths {
		t, _ := d.(amqp.Table)
		if q, _ := headerString(t, "queue"); q != "" {
			if _, _, _, ok := topology.ParseRung(q); ok {
				return q
			}
		}
	}
	return ""
}

// deliveryCounted reports a quorum queue's mark on a delivery: up to 4.2
// RabbitMQ counts every return in x-delivery-count; 4.3 and later count
// every return in x-acquired-count and only failed ones in
// x-delivery-count.
func deliveryCounted(h amqp.Table) bool {
	_, counted := h["x-delivery-count"]
	_, acquired := h["x-acquired-count"]
	return counted || acquired
}

// Preview returns up to max bytes of body as one line of printable text:
// cut on a character boundary, with control characters and bytes that are
// not UTF-8 shown as '.', and "…" appended when something was cut.
func Preview(body []byte, max int) string {
	if max < 0 {
		max = 0
	}
	cut := body
	more := false
	if len(cut) > max {
		cut, more = cut[:max], true
		// Do not end in the middle of a character.
		for i := 0; i < utf8.UTFMax && len(cut) > 0 && !utf8.Valid(cut); i++ {
			cut = cut[:len(cut)-1]
		}
	}
	var sb strings.Builder
	for len(cut) > 0 {
		r, size := utf8.DecodeRune(cut)
		cut = cut[size:]
		if (r == utf8.RuneError && size <= 1) || (!unicode.IsPrint(r) && r != ' ') {
			sb.WriteByte('.')
			continue
		}
		sb.WriteRune(r)
	}
	if more {
		sb.WriteString("…")
	}
	return sb.String()
}

// headerString reads a header written as a string, or as bytes holding
// UTF-8 (as some AMQP clients write text).
func headerString(h amqp.Table, key string) (string, bool) {
	switch v := h[key].(type) {
	case string:
		return v, true
	case []byte:
		if utf8.Valid(v) {
			return string(v), true
		}
	}
	return "", false
}

// headerTime reads a header written as an AMQP timestamp, or leniently as
// Unix seconds or an RFC 3339 string. Zero when absent or unreadable.
func headerTime(h amqp.Table, key string) time.Time {
	switch v := h[key].(type) {
	case time.Time:
		return v
	case int64:
		return time.Unix(v, 0)
	case int32:
		return time.Unix(int64(v), 0)
	case int:
		return time.Unix(int64(v), 0)
	case string, []byte:
		s, _ := headerString(h, key)
		s = strings.TrimSpace(s)
		if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
			return t
		}
		if n, err := strconv.ParseInt(s, 10, 64); err == nil {
			return time.Unix(n, 0)
		}
	}
	return time.Time{}
}
