package mq

import (
	"context"
	"errors"
	"log/slog"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Delivery is one message as a consumer received it: the fields of the
// amqp091-go delivery by their amqp091-go names (d.Body, d.Headers,
// d.MessageId, d.CorrelationId, d.ContentType, d.Exchange, d.RoutingKey,
// d.Redelivered, d.DeliveryTag, …), the queue it came from and its attempt
// number. It is stamped with the channel it came on; the runtime settles it
// there, and never on a later channel. It has no Ack, Nack or Reject:
// settlement belongs to the runtime, and the handler's error decides it.
type Delivery struct {
	envelope

	queue   string
	attempt int
	calls   int
	outcome Outcome
	cause   error
	from    deliverer // who delivered it: a consumer's session, or a stand-in
	lane    *lane     // the channel it came on, where it is settled
	slot    bool      // holds one of its session's slots
	used    int       // the last attempt that ran to its end (see endAttempt)

	asideFailed bool // it reported EventSetAsideFailed: a return is the library's failure (see asidePause)
}

// deliverer is what a Delivery asks of whoever delivered it, as an
// amqp091-go delivery asks its Acknowledger: a consumer's session
// implements it, and a delivery built outside any consumer (package mqtest,
// through internal/seam) gets a stand-in that does what its test says.
type deliverer interface {
	// hop publishes a hop's copy m to queue (Delivery.Forward).
	hop(ctx context.Context, queue string, kind HopKind, m Message) error
	// event reports e to the EventHooks (Delivery.Emit).
	event(ctx context.Context, e Event)
	// logger is the consumer's logger.
	logger() *slog.Logger
	// wait waits w before d's next attempt (Delivery.Wait).
	wait(ctx context.Context, d *Delivery, w time.Duration) error
	// drains is closed when the consumer stops or the channel is lost.
	drains() <-chan struct{}
	// server is host:port of the connection, "" if none.
	server() string
	// login is the user name the connection logged in with, "" if none.
	login() string
	// cutShort reports whether the consumer has cut its handlers short
	// (a lost channel, a stop deadline).
	cutShort() bool
}

// runtime is d.from; a zero Delivery (made with new) behaves as one
// built outside any consumer with no test options.
func (d *Delivery) runtime() deliverer {
	if d.from == nil {
		return standIn{}
	}
	return d.from
}

// envelope is amqp.Delivery without its methods: its fields are promoted
// into Delivery, its Ack/Nack/Reject (which would bypass the runtime and
// always fail, the acknowledger being withheld) are not.
type envelope amqp.Delivery

// Queue is the queue the delivery came from.
func (d *Delivery) Queue() string { return d.queue }

// Attempt is this attempt's number, counting from 1: the x-acemq-attempt
// header the delivery carried (absent means 1), plus each return of the
// copy a quorum queue counted (x-delivery-count) past the first two, never
// less than the attempt the consumer remembers it reached before returning
// it itself; plus one for each in-process retry of it so far.
func (d *Delivery) Attempt() int { return d.attempt }

// Outcome is what the middleware decided for the delivery (SetOutcome), or
// after settlement, what the runtime did. Empty before either.
func (d *Delivery) Outcome() Outcome { return d.outcome }

// SetOutcome records what a middleware did with the delivery (republished
// it to a rung, say) and the error that caused it, so logging and hooks can
// report it; the runtime still settles according to the error the chain
// returns.
func (d *Delivery) SetOutcome(o Outcome, cause error) { d.outcome, d.cause = o, cause }

// Cause is the error recorded with the outcome (nil for a plain ack).
func (d *Delivery) Cause() error { return d.cause }

// Draining is closed when the delivery's consumer starts stopping or the
// channel it came on is lost: a middleware waiting in-process should stop
// waiting and return Requeue.
func (d *Delivery) Draining() <-chan struct{} { return d.runtime().drains() }

// Logger is the consumer's logger.
func (d *Delivery) Logger() *slog.Logger { return d.runtime().logger() }

// Message copies the delivery for republishing: body and properties
// unchanged, headers copied.
func (d *Delivery) Message() Message { return MessageOf(amqp.Delivery(d.envelope)) }

// Forward republishes the delivery to queue through the default exchange,
// mandatory, with set added to its headers, and returns once the broker
// confirmed it: ErrUnroutable if queue does not exist. This is how the
// library makes its own hops (retry, dead letter, park); kind tells the
// hooks which.
//
// The copy is the delivery's body and properties but for what would make
// it vanish, multiply or be refused on the way (HopMessage), and it
// records where the message came from: the exchange and routing key it was
// first delivered with (HeaderOriginalExchange, HeaderOriginalRoutingKey),
// written by the first hop and kept by every later one.
func (d *Delivery) Forward(ctx context.Context, queue string, kind HopKind, set amqp.Table) error {
	m := d.HopMessage()
	for k, v := range set {
		m.Headers[k] = v
	}
	return d.runtime().hop(ctx, queue, kind, m)
}

// Emit reports an event to the broker's EventHooks.
func (d *Delivery) Emit(ctx context.Context, e Event) {
	if e.Queue == "" {
		e.Queue = d.queue
	}
	if e.Name == EventSetAsideFailed {
		d.asideFailed = true
	}
	d.runtime().event(ctx, e)
}

// Server is host:port of the connection the delivery came on.
func (d *Delivery) Server() string { return d.runtime().server() }

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
	return d.runtime().wait(ctx, d, w)
}

// HopMessage is the copy a hop publishes: Message, less a per-message
// expiration (the copy would vanish from .dlq, or come home from a rung
// early), the CC and BCC headers (the broker would send an extra copy to
// those queues on every hop) and a user_id other than the consumer's own
// login (the broker would refuse every hop); plus the original exchange and
// routing key in headers, if the delivery carries none yet.
func (d *Delivery) HopMessage() Message {
	m := d.Message()
	if m.Headers == nil {
		m.Headers = make(amqp.Table, 8)
	}
	m.Expiration = ""
	delete(m.Headers, "CC")
	delete(m.Headers, "BCC")
	if m.UserId != "" && m.UserId != d.runtime().login() {
		m.UserId = ""
	}
	if _, ok := m.Headers[HeaderOriginalExchange]; !ok {
		m.Headers[HeaderOriginalExchange] = d.Exchange
	}
	if _, ok := m.Headers[HeaderOriginalRoutingKey]; !ok {
		m.Headers[HeaderOriginalRoutingKey] = d.RoutingKey
	}
	return m
}

// restoreOrigin gives a delivery that has hopped the exchange and routing
// key it was first delivered with, from the headers its first hop wrote.
func restoreOrigin(raw *amqp.Delivery) {
	if len(raw.Headers) == 0 {
		return
	}
	if v, ok := raw.Headers[HeaderOriginalExchange].(string); ok {
		raw.Exchange = v
	}
	if v, ok := raw.Headers[HeaderOriginalRoutingKey].(string); ok {
		raw.RoutingKey = v
	}
}
