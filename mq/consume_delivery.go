package mq

import (
	"errors"
	"log/slog"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Delivery is one message as a consumer received it: its body and
// properties (the fields below, named as amqp091-go names them), where it
// was published to, the queue it came from ([Delivery.Queue]) and its
// attempt number ([Delivery.Attempt]). It is stamped with the channel it
// came on; the runtime settles it there, and never on a later channel. It
// has no Ack, Nack or Reject: settlement belongs to the runtime, and the
// handler's error decides it.
type Delivery struct {
	// Body is the message's payload.
	Body []byte
	// Headers are the message's headers: the publisher's, and those the
	// library and the broker add (x-acemq-attempt, x-death, …).
	Headers amqp.Table
	// MessageId is the publisher's id of the message: what the inbox and
	// the consumer's attempt memory know a message by.
	MessageId string
	// CorrelationId ties the message to another (a request's reply, say).
	CorrelationId string
	// ContentType is Body's MIME type.
	ContentType string
	// ContentEncoding is Body's encoding (gzip, say).
	ContentEncoding string
	// Type is the publisher's name for the kind of message.
	Type string
	// ReplyTo is the queue a reply goes to.
	ReplyTo string
	// AppId is the publishing application's name.
	AppId string
	// UserId is the user the publisher logged in as, when it set it (the
	// broker checks it).
	UserId string
	// Timestamp is when the publisher stamped the message.
	Timestamp time.Time
	// Expiration is the message's own time to live, in milliseconds.
	Expiration string
	// Priority is the message's priority (0 when the publisher set none).
	Priority uint8
	// DeliveryMode is 2 for a persistent message, 1 or 0 for a transient
	// one.
	DeliveryMode uint8
	// Exchange is the exchange the message was published to: for a
	// delivery that came back from a retry rung, .dlq or .parked, the
	// original exchange, not the hop's.
	Exchange string
	// RoutingKey is the key the message was published with, the original
	// one for a delivery that came back from a hop, as Exchange.
	RoutingKey string
	// Redelivered is the broker's flag: the message was delivered before
	// and not acknowledged (the attempt number says more).
	Redelivered bool
	// ConsumerTag names the subscription the delivery came on.
	ConsumerTag string
	// DeliveryTag numbers the delivery on its channel; the library
	// settles by it.
	DeliveryTag uint64

	queue   string
	attempt int
	calls   int
	outcome Outcome
	cause   error
	from    Runtime // who carries out its decisions: a consumer's session, or a fake
	lane    *lane   // the channel it came on, where it is settled
	slot    bool    // holds one of its session's slots
	used    int     // the last attempt that ran to its end (see endAttempt)

	asideFailed bool        // its set-aside failed: the return is the library's failure (see asidePause)
	kept        bool        // its wait was cut short under InOrder: it goes back with basic.nack, keeping its place (see carry)
	aside       *asideRetry // a hop that was refused, made again instead of another attempt (see attemptMemo, pendingFate)
	pending     bool        // a copy that carries its refused hop (headerPendingHop): see refused
	homeCopy    bool        // its refused hop went to its own queue on a confirmed copy (see refused)
}

// consumerRuntime is what a consumer's session answers beyond Runtime; a
// delivery whose Runtime is not one (a fake's) has none of it.
type consumerRuntime interface {
	// drains is closed when the consumer stops or the channel is lost.
	drains() <-chan struct{}
	// server is host:port of the connection.
	server() string
	// login is the user name the connection logged in with.
	login() string
	// cutShort reports whether the consumer has cut its handlers short
	// (a lost channel, a stop deadline).
	cutShort() bool
	// keepsOrder reports whether the consumer keeps the queue's order
	// (InOrder).
	keepsOrder() bool
	// hopped notes that d's fate was carried out (a confirmed hop) by
	// the carrier at place at-1 (see attemptMemo.rememberHop).
	hopped(d *Delivery, at int)
}

// runtime is d.from; a zero Delivery (made with new) behaves as one
// built with no Runtime.
func (d *Delivery) runtime() Runtime {
	if d.from == nil {
		return standIn{}
	}
	return d.from
}

// consumer is d's consumer session, nil outside a consumer.
func (d *Delivery) consumer() consumerRuntime {
	cr, _ := d.from.(consumerRuntime)
	return cr
}

// received builds a Delivery holding raw's body and properties; raw's
// Acknowledger is left out (settling belongs to the runtime), and so is its
// MessageCount (basic.get's alone; ops.Count counts a queue).
func received(raw amqp.Delivery) *Delivery {
	return &Delivery{
		Body: raw.Body, Headers: raw.Headers, MessageId: raw.MessageId, CorrelationId: raw.CorrelationId,
		ContentType: raw.ContentType, ContentEncoding: raw.ContentEncoding, Type: raw.Type,
		ReplyTo: raw.ReplyTo, AppId: raw.AppId, UserId: raw.UserId, Timestamp: raw.Timestamp,
		Expiration: raw.Expiration, Priority: raw.Priority, DeliveryMode: raw.DeliveryMode,
		Exchange: raw.Exchange, RoutingKey: raw.RoutingKey, Redelivered: raw.Redelivered,
		ConsumerTag: raw.ConsumerTag, DeliveryTag: raw.DeliveryTag,
	}
}

// raw is d's body and properties as amqp091-go holds them, with no
// Acknowledger.
func (d *Delivery) raw() amqp.Delivery {
	return amqp.Delivery{
		Body: d.Body, Headers: d.Headers, MessageId: d.MessageId, CorrelationId: d.CorrelationId,
		ContentType: d.ContentType, ContentEncoding: d.ContentEncoding, Type: d.Type,
		ReplyTo: d.ReplyTo, AppId: d.AppId, UserId: d.UserId, Timestamp: d.Timestamp,
		Expiration: d.Expiration, Priority: d.Priority, DeliveryMode: d.DeliveryMode,
		Exchange: d.Exchange, RoutingKey: d.RoutingKey, Redelivered: d.Redelivered,
		ConsumerTag: d.ConsumerTag, DeliveryTag: d.DeliveryTag,
	}
}

// Queue is the queue the delivery came from.
func (d *Delivery) Queue() string { return d.queue }

// Attempt is this attempt's number, counting from 1: the x-acemq-attempt
// header the delivery carried (absent means 1), plus each return of the
// copy a quorum queue counted (x-delivery-count) past the first two, never
// less than the attempt the consumer remembers it reached before returning
// it itself; plus one for each in-process retry of it so far. Read after
// next returns, it is the last attempt that ran (see Middleware).
func (d *Delivery) Attempt() int { return d.attempt }

// Outcome is what became of the delivery: empty while an attempt runs; the
// handler's own success reads as OutcomeAck inside the chain already; and
// once a middleware's next has returned, the outcome the consumer carries
// out for what next returned, never empty (see Middleware).
func (d *Delivery) Outcome() Outcome { return d.outcome }

// Cause is the error that led to the outcome (nil for a plain ack).
func (d *Delivery) Cause() error { return d.cause }

// Draining is closed when the delivery's consumer starts stopping or the
// channel it came on is lost: a middleware waiting in-process should stop
// waiting and return Requeue.
func (d *Delivery) Draining() <-chan struct{} {
	if cr := d.consumer(); cr != nil {
		return cr.drains()
	}
	return nil
}

// Logger is the consumer's logger.
func (d *Delivery) Logger() *slog.Logger { return d.runtime().Logger() }

// message copies the delivery for republishing: body and properties
// unchanged, headers copied less the broker's counters (see MessageOf).
func (d *Delivery) message() Message { return MessageOf(d.raw()) }

// Server is host:port of the connection the delivery came on ("" outside
// a consumer).
func (d *Delivery) Server() string {
	if cr := d.consumer(); cr != nil {
		return cr.server()
	}
	return ""
}

// errWaitCut is what a consumer's wait returns when it was cut short: the
// consumer is stopping, the delivery's channel was lost, or ctx ended.
var errWaitCut = errors.New("mq: in-process wait cut short")

// hopMessage is the copy a hop publishes: Message, less a per-message
// expiration (the copy would vanish from .dlq, or come home from a rung
// early), the CC and BCC headers (the broker would send an extra copy to
// those queues on every hop) and a user_id other than the consumer's own
// login (the broker would refuse every hop) and a pending hop (the hop
// names its own target); plus the original exchange and routing key in
// headers, if the delivery carries none yet.
func (d *Delivery) hopMessage() Message {
	m := d.message()
	if m.Headers == nil {
		m.Headers = make(amqp.Table, 8)
	}
	m.Expiration = ""
	delete(m.Headers, "CC")
	delete(m.Headers, "BCC")
	delete(m.Headers, headerPendingHop)
	if m.UserId != "" && m.UserId != d.login() {
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

// login is the user name the delivery's connection logged in with, ""
// outside a consumer.
func (d *Delivery) login() string {
	if cr := d.consumer(); cr != nil {
		return cr.login()
	}
	return ""
}
