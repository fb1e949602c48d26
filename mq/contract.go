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
	// HeaderReason says why a message was set aside: see the [Reason] values.
	HeaderReason = "x-acemq-reason"
	// HeaderError is the handler's error text, capped at 4096 bytes.
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

// headerPendingHop names the queue a copy in its own queue still has to go
// to (its .dlq, its .parked or one of its rungs): the hop there was
// refused, so the copy it would have made waits at home, carrying the
// headers that hop wrote, until the consumer makes the hop again. A Go
// extension (docs/contract.md, "Go's extension headers") that only the
// consumer runtime reads and writes, so it is not exported.
const headerPendingHop = "x-acemq-pending-hop"

// maxErrorHeader caps [HeaderError], in bytes.
const maxErrorHeader = 4096

// ErrorText is err's text as the library writes it down — in
// x-acemq-error, and in otelmq's span statuses: at most 4096
// bytes, cut on a rune boundary; empty for nil. Only the cut is inspected:
// bytes that were not valid UTF-8 in the error's text are kept as they were.
func ErrorText(err error) string {
	if err == nil {
		return ""
	}
	s := err.Error()
	if len(s) <= maxErrorHeader {
		return s
	}
	// Back off to the start of the rune the cap falls in (at most
	// utf8.UTFMax-1 bytes).
	n := maxErrorHeader
	for i := 0; i < utf8.UTFMax-1 && n > 0 && !utf8.RuneStart(s[n]); i++ {
		n--
	}
	return s[:n]
}

// Reason is the value of [HeaderReason].
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

// Outcome is what became of a message, in one word used alike in code,
// logs, metrics and hooks: what the consumer did with a delivery
// ([Delivery.Outcome], [Decision]), and why the library republished a message
// itself (a hop: [PublishInfo.Hop], docs/contract.md, "Hops").
type Outcome string

// The outcomes of a message.
const (
	// OutcomeAck: handled; acknowledged.
	OutcomeAck Outcome = "ack"
	// OutcomeRetry: republished to a broker rung (or to its own queue, a
	// wait cut short by Stop); acknowledged. As a [Decision] without a
	// queue: retried in-process after a wait.
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
	// OutcomeReplay: republished from .dlq or .parked to the queue it
	// failed on (ops.Replay); a hop only.
	OutcomeReplay Outcome = "replay"
)
