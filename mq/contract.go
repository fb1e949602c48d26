package mq

import "unicode/utf8"

// Headers the library writes on the messages it republishes (docs/contract.md, "Headers").
// Other AceMQ libraries read them; they are written here once.
const (
	// HeaderAttempt is the attempt number the next delivery is (the first
	// delivery has none: absent means 1).
	HeaderAttempt = "x-acemq-attempt"
	// HeaderSourceQueue is the queue the message failed on (retry, dead
	// letter, park).
	HeaderSourceQueue = "x-acemq-source-queue"
	// HeaderReason says why a message was set aside: see the Reason values.
	HeaderReason = "x-acemq-reason"
	// HeaderError is the handler's error text, capped at MaxErrorHeader bytes.
	HeaderError = "x-acemq-error"
	// HeaderFailedAt is the AMQP timestamp of the failure.
	HeaderFailedAt = "x-acemq-failed-at"
	// HeaderReplayedAt is the AMQP timestamp of a replay from .dlq or
	// .parked back to the source queue.
	HeaderReplayedAt = "x-acemq-replayed-at"
	// HeaderReplayedFrom is the queue a replayed message came from.
	HeaderReplayedFrom = "x-acemq-replayed-from"
	// HeaderHopTraceparent carries the W3C trace context of the hop that
	// republished the message, so the next delivery can link to it while
	// traceparent keeps pointing at the message's creation.
	HeaderHopTraceparent = "x-acemq-hop-traceparent"
	// HeaderOriginalExchange and HeaderOriginalRoutingKey are the exchange
	// and routing key the message was first delivered with, written by its
	// first hop and kept by every later hop and by replay, so a handler sees
	// the same origin on attempt 5 as on attempt 1 (Delivery.Exchange and
	// Delivery.RoutingKey read them). Optional extensions of the contract.
	HeaderOriginalExchange   = "x-acemq-original-exchange"
	HeaderOriginalRoutingKey = "x-acemq-original-routing-key"
)

// MaxErrorHeader caps HeaderError, in bytes.
const MaxErrorHeader = 4096

// ErrorText is err's text as the library writes it down — in
// x-acemq-error, and in otelmq's span statuses: at most MaxErrorHeader
// bytes, cut on a rune boundary; empty for nil. Only the cut is inspected:
// bytes that were not valid UTF-8 in the error's text are kept as they were.
func ErrorText(err error) string {
	if err == nil {
		return ""
	}
	s := err.Error()
	if len(s) <= MaxErrorHeader {
		return s
	}
	// Back off to the start of the rune the cap falls in (at most
	// utf8.UTFMax-1 bytes).
	n := MaxErrorHeader
	for i := 0; i < utf8.UTFMax-1 && n > 0 && !utf8.RuneStart(s[n]); i++ {
		n--
	}
	return s[:n]
}

// Reason is the value of HeaderReason.
type Reason string

// The reasons a message is set aside.
const (
	// ReasonExhausted: every attempt of the retry policy was used.
	ReasonExhausted Reason = "exhausted"
	// ReasonRejected: the handler said the failure is permanent (Reject).
	ReasonRejected Reason = "rejected"
	// ReasonParked: a person must look at it (Park).
	ReasonParked Reason = "parked"
	// ReasonRungMissing: the retry rung it was sent to does not exist.
	ReasonRungMissing Reason = "rung-missing"
)

// Events the contract names. Each is the message of the log record that
// reports it, so it is greppable and the same in every AceMQ library, and
// the Name of the Event the hooks see.
const (
	// EventRungMissing: a retry's publish to its rung came back unroutable;
	// the message was set aside in the dead-letter queue instead.
	EventRungMissing = "acemq.retry.rung.missing"
	// EventSetAsideFailed: a publish to .dlq or .parked failed; the original
	// was returned to its queue after a pause, never dropped.
	EventSetAsideFailed = "acemq.messages.set.aside.failed"
	// EventRetry: a failed attempt is retried (Event.Kind says in-process
	// or broker; carried when a wait cut short by Stop is republished to
	// the queue with its next attempt).
	EventRetry = "acemq.retry"
	// EventConnectionLost and EventConnectionRestored report the broker
	// connection's supervisor at work.
	EventConnectionLost     = "acemq.connection.lost"
	EventConnectionRestored = "acemq.connection.restored"
	// EventConsumerSubscribeFailed: a running consumer could not resubscribe
	// and will try again.
	EventConsumerSubscribeFailed = "acemq.consumer.subscribe.failed"
	// EventRequeued: the library returned a delivery to its queue itself (a
	// hop that could not be made, a handler or wait cut short, a panic
	// outside every middleware). Event.Kind says why. On a quorum queue each
	// return counts against its delivery limit (RabbitMQ 4.x: 20 by default).
	EventRequeued = "acemq.message.requeued"
	// EventDeadLetterMissing: Declare declared a quorum queue with no
	// dead-letter route (no x-dead-letter-exchange). A message returned to
	// it past its delivery limit (RabbitMQ 4.x: 20 by default; 3.x: none
	// unless x-delivery-limit is set) is dropped by the broker, not
	// dead-lettered; give the queue topology.DeadLetter() to keep it.
	EventDeadLetterMissing = "acemq.queue.dead.letter.missing"
)

// Outcome is what became of a delivery.
type Outcome string

// The outcomes of a delivery.
const (
	// OutcomeAck: handled; acknowledged.
	OutcomeAck Outcome = "ack"
	// OutcomeRetry: republished to a broker rung; acknowledged.
	OutcomeRetry Outcome = "retry"
	// OutcomeDeadLetter: republished to .dlq; acknowledged.
	OutcomeDeadLetter Outcome = "dead-letter"
	// OutcomePark: republished to .parked; acknowledged.
	OutcomePark Outcome = "park"
	// OutcomeRequeue: returned to its queue (basic.reject with requeue,
	// which RabbitMQ 4.3 counts toward a quorum queue's delivery limit).
	OutcomeRequeue Outcome = "requeue"
	// OutcomeReject: rejected without requeue (the broker's own dead-letter
	// route, if the queue has one).
	OutcomeReject Outcome = "reject"
)

// HopKind says why the library republished a message itself.
type HopKind string

// The library's own hops (docs/contract.md, "Hops").
const (
	HopNone       HopKind = ""
	HopRetry      HopKind = "retry"
	HopDeadLetter HopKind = "dead-letter"
	HopPark       HopKind = "park"
	HopReplay     HopKind = "replay"
)
