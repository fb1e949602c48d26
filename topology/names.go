package topology

import (
	"strconv"
	"strings"
	"time"

	"github.com/acemq/acemq-go/retry"
	amqp "github.com/rabbitmq/amqp091-go"
)

// The contract's names (docs/contract.md, "Names"). Every other package reads these; none spells
// them again.
const (
	// DeadLetterSuffix names the queue a message goes to when every attempt
	// is used: orders.new → orders.new.dlq.
	DeadLetterSuffix = ".dlq"
	// ParkedSuffix names the queue a message goes to when a person must look
	// at it: orders.new → orders.new.parked.
	ParkedSuffix = ".parked"
	// RetrySegment sits between a queue's name and a rung's delay:
	// orders.new.retry.30s.
	RetrySegment = ".retry."
	// RetryExchange is the direct, durable exchange a retry rung
	// dead-letters through on its way back to the queue it came from.
	RetryExchange = "acemq.retry"
	// DurableRungSuffix ends the name of a durable rung, after the classic
	// rung's name: orders.new.retry.40s.quorum. A classic rung's name ends
	// in a delay, so the two kinds never share a name and live side by side.
	DurableRungSuffix = ".quorum"
	// DeadLetterExchange is the direct, durable exchange the dead-letter and
	// parked queues are bound to.
	DeadLetterExchange = "acemq.dlx"
)

// The queue arguments the contract writes (docs/contract.md, "Queue arguments").
const (
	ArgQueueType            = "x-queue-type"
	ArgDeadLetterExchange   = "x-dead-letter-exchange"
	ArgDeadLetterRoutingKey = "x-dead-letter-routing-key"
	ArgMessageTTL           = "x-message-ttl"
	ArgDeadLetterStrategy   = "x-dead-letter-strategy"
	ArgOverflow             = "x-overflow"
	// DeadLetterAtLeastOnce is a durable rung's x-dead-letter-strategy: the
	// quorum queue's leader re-publishes each expired message with
	// confirms until one is received.
	DeadLetterAtLeastOnce = "at-least-once"
	// OverflowRejectPublish is a durable rung's x-overflow: a full rung nacks
	// the hop (with drop-head the broker falls back to at most once).
	OverflowRejectPublish = "reject-publish"
	// QueueTypeQuorum is the value of x-queue-type for a quorum queue. There
	// is deliberately no constant for classic: a classic queue is declared by
	// leaving x-queue-type off.
	QueueTypeQuorum = "quorum"
)

// DeadLetterQueue is where q's messages go when every attempt is used.
func DeadLetterQueue(q string) string { return q + DeadLetterSuffix }

// ParkedQueue is where q's messages go when a person must look at them.
func ParkedQueue(q string) string { return q + ParkedSuffix }

// RungQueue is the broker rung of q that waits d: RungQueue("orders.new",
// 30*time.Second) is "orders.new.retry.30s".
func RungQueue(q string, d time.Duration) string { return q + RetrySegment + Short(d) }

// DurableRungQueue is the durable rung of q that waits d:
// DurableRungQueue("orders.new", 40*time.Second) is
// "orders.new.retry.40s.quorum". It is never the name of a classic rung.
func DurableRungQueue(q string, d time.Duration) string {
	return RungQueue(q, d) + DurableRungSuffix
}

// Rung is the rung of q that p keeps a wait of d in: a classic rung, or a
// durable one when p asks for [retry.DurableRungs]. This is the one place
// that picks the kind; the topology, the ladder and the tools all ask it.
func Rung(q string, p retry.Policy, d time.Duration) Queue {
	if p.DurableRungs() {
		return Queue{Name: DurableRungQueue(q, d), Durable: true, Args: DurableRungArguments(q, d)}
	}
	return Queue{Name: RungQueue(q, d), Durable: true, Args: RungArguments(q, d)}
}

// ParseRung reads a rung's name back: the queue it brings messages home to,
// the wait it holds them for, and whether it is a durable rung. ok is false
// for a name that is not a rung's (<queue>.retry.<wait> or
// <queue>.retry.<wait>.quorum, with a wait [Short] writes). It is the one
// reader of rung names; tools, traces and the field all ask it.
func ParseRung(name string) (queue string, wait time.Duration, durable, ok bool) {
	rest, durable := strings.CutSuffix(name, DurableRungSuffix)
	i := strings.LastIndex(rest, RetrySegment)
	if i <= 0 {
		return "", 0, false, false
	}
	w := rest[i+len(RetrySegment):]
	d, err := time.ParseDuration(w)
	if err != nil || d <= 0 || Short(d) != w {
		return "", 0, false, false
	}
	return rest[:i], d, durable, true
}

// Short writes a duration as the shortest thing that reads as one, in whole
// seconds (truncated): 30s, 90s, 2m, 90m, 2h. Anything under a second is 0s.
func Short(d time.Duration) string {
	s := int64(d / time.Second)
	switch {
	case s <= 0:
		return "0s"
	case s%3600 == 0:
		return strconv.FormatInt(s/3600, 10) + "h"
	case s%60 == 0:
		return strconv.FormatInt(s/60, 10) + "m"
	default:
		return strconv.FormatInt(s, 10) + "s"
	}
}

// RungArguments is the argument table of q's rung that waits d: expired
// messages dead-letter through [RetryExchange] back to q after d. This is the
// only place the table is built; the TTL is an integer number of
// milliseconds (a float is a different argument to the broker).
func RungArguments(q string, d time.Duration) amqp.Table {
	return amqp.Table{
		ArgDeadLetterExchange:   RetryExchange,
		ArgDeadLetterRoutingKey: q,
		ArgMessageTTL:           d.Milliseconds(),
	}
}

// DurableRungArguments is the argument table of q's durable rung that
// waits d: a quorum queue whose expired messages dead-letter at least once
// through [RetryExchange] back to q, refusing publishes when full, with no
// x-expires. This is the only place the table is built; the TTL is an
// integer number of milliseconds, as in [RungArguments].
func DurableRungArguments(q string, d time.Duration) amqp.Table {
	return amqp.Table{
		ArgQueueType:            QueueTypeQuorum,
		ArgDeadLetterExchange:   RetryExchange,
		ArgDeadLetterRoutingKey: q,
		ArgMessageTTL:           d.Milliseconds(),
		ArgDeadLetterStrategy:   DeadLetterAtLeastOnce,
		ArgOverflow:             OverflowRejectPublish,
	}
}

// DeadLetterArguments is what [DeadLetter]() adds to a source queue q: the
// broker's own route to q.dlq for messages the library never sees.
func DeadLetterArguments(q string) amqp.Table {
	return amqp.Table{
		ArgDeadLetterExchange:   DeadLetterExchange,
		ArgDeadLetterRoutingKey: DeadLetterQueue(q),
	}
}
