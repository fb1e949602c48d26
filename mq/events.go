package mq

import "time"

// Events the contract names. Each is the message of the log record that
// reports it, so it is greppable and the same in every AceMQ library, and
// the Name of the [Event] the hooks see.
const (
	// EventRungMissing: a retry's publish to its rung came back unroutable;
	// the message was set aside in the dead-letter queue instead.
	EventRungMissing = "acemq.retry.rung.missing"
	// EventSetAsideFailed: a publish to .dlq or .parked failed; the original
	// was returned to its queue with basic.nack (the library's failure, not
	// the message's: RabbitMQ 4.3 does not count it toward the delivery
	// limit) after a pause that doubles with its returns. Up to 4.2 a queue
	// with no dead-letter route drops it past its limit (docs/reliability.md).
	EventSetAsideFailed = "acemq.messages.set.aside.failed"
	// EventRetry: a failed attempt is retried ([Event.Kind] says in-process
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
	// outside every middleware). [Event.Kind] says why. On a quorum queue each
	// return counts against its delivery limit (RabbitMQ 4.x: 20 by default).
	EventRequeued = "acemq.message.requeued"
	// EventDeadLetterMissing: Declare declared a quorum queue with no
	// dead-letter route (no x-dead-letter-exchange). A message returned to
	// it past its delivery limit (RabbitMQ 4.x: 20 by default; 3.x: none
	// unless x-delivery-limit is set) is dropped by the broker, not
	// dead-lettered; give the queue [topology.DeadLetter]() to keep it.
	EventDeadLetterMissing = "acemq.queue.dead.letter.missing"
)

// Events of connections and consumers that keep dying.
const (
	// EventConnectionFlapping: the connection died within a second of
	// coming up three times in a row (an endpoint that accepts and then
	// drops every connection, a load balancer in front of a dead node).
	// Logged once per streak, with the last error; every redial of the
	// streak waits the backoff of the attempts so far.
	EventConnectionFlapping = "acemq.connection.flapping"
	// EventConsumerPoison: a consumer's connection died of a frame its
	// client library could not decode, right after the consumer
	// subscribed, three times in a row: most likely a message at the
	// head of the queue that another client published and amqp091-go
	// cannot read (headers nested deeper than 32, a table of more than
	// 8192 entries). The consumer backs off between resubscribes; the
	// message has to be removed by other means (see the README).
	EventConsumerPoison = "acemq.consumer.poison"
)

// Events of topology recovery: what the broker forgot, the library
// declares again ([Broker.Declare], docs/recovery.md).
const (
	// EventTopologyRedeclared: the library declared a queue again, with
	// its bindings. Logged with why: "reconnect" (an exclusive,
	// auto-delete or transient queue, on a new connection, before any
	// consumer resubscribed; not an exclusive or auto-delete one whose
	// consumers all stopped) or "missing" (a subscribe found the queue
	// gone, and the consumer subscribes again at once). [Event.Queue] is the
	// queue; for "missing", [Event.Err] is the NOT_FOUND that found it gone.
	EventTopologyRedeclared = "acemq.topology.redeclared"
	// EventTopologyRedeclareFailed: declaring again was refused or could
	// not be done (an exclusive queue still held for the connection that
	// died, say). A consumer of the queue retries with backoff and tries
	// again when it finds the queue missing.
	EventTopologyRedeclareFailed = "acemq.topology.redeclare.failed"
)

// Event is a notable thing the library did or could not do.
type Event struct {
	// Name is one of the Event* constants.
	Name string
	// Queue is the consumer's queue.
	Queue string
	// Target is the queue a hop was for, when there was one.
	Target string
	// Attempt is the attempt that failed, when it applies.
	Attempt int
	// Kind qualifies the event; empty for the others. For [EventRetry], how
	// it retries: "in-process" (waits before the next attempt), "broker"
	// (republishes to a broker rung) or "carried" (republishes to the queue
	// itself, with its next attempt, a wait cut short by Stop). For
	// [EventRequeued], why it returned the delivery: "cut short" (the
	// consumer cut the handler or its wait short: a lost channel, a stop
	// deadline), "panic" (a panic escaped every middleware) or "requeued"
	// (the chain returned [Requeue]: a hop that could not be made, say).
	Kind string
	// Wait is the retry wait, for [EventRetry].
	Wait time.Duration
	// Err is the failure, when there was one.
	Err error
}

// The kinds of [EventRetry] and [EventRequeued] ([Event.Kind]).
const (
	kindInProcess = "in-process"
	kindBroker    = "broker"
	kindCarried   = "carried"
	kindCutShort  = "cut short"
	kindPanic     = "panic"
	kindRequeue   = "requeued"
)
