// Package mqlink is what package mq lends the packages built on it
// (mqtest, fxmodule, middleware, ops, otelmq, outbox) and their tests,
// typed: mq fills package link in its init, and this package reads it. A
// user of mq never needs any of it.
package mqlink

import (
	"context"
	"log/slog"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/internal/link"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/retry"
)

// The validator's limits (package link).
const (
	MaxShortString  = link.MaxShortString
	MaxHeaderDepth  = link.MaxHeaderDepth
	MaxTableEntries = link.MaxTableEntries
	MaxErrorHeader  = link.MaxErrorHeader
)

// CheckName checks a short string about to be sent (a queue or exchange
// name, a routing key): at most MaxShortString bytes; field names it in
// the error, which matches mq.ErrInvalid.
func CheckName(field, s string) error { return link.CheckName(field, s) }

// CheckTable checks a table about to be sent (headers, arguments) as
// every publish and declaration of mq does; the error matches
// mq.ErrInvalid.
func CheckTable(field string, t amqp.Table) error { return link.CheckTable(field, t) }

// CheckPublish checks a publish of m to exchange with key as
// Publisher.Publish does before it sends; the error matches mq.ErrInvalid.
func CheckPublish(exchange, key string, m mq.Message) error {
	return link.CheckPublish.(func(string, string, mq.Message) error)(exchange, key, m)
}

// ErrorText is err's text as mq writes it down (x-acemq-error, span
// statuses): at most MaxErrorHeader bytes, cut on a rune boundary; empty
// for nil.
func ErrorText(err error) string { return link.ErrorText(err) }

// Redact hides the credentials of a broker URL or a keyword/value
// connection string, as every log record and error of mq does.
func Redact(u string) string { return link.Redact(u) }

// AttemptOf reads the x-acemq-attempt header as a consumer does: 1 when it
// is missing or not a positive number.
func AttemptOf(h amqp.Table) int { return link.AttemptOf(h) }

// MessageOf copies a delivery for republishing, as a consumer's hops do:
// body and properties unchanged, headers copied less the broker's
// counters.
func MessageOf(d amqp.Delivery) mq.Message {
	return link.MessageOf.(func(amqp.Delivery) mq.Message)(d)
}

// AsHop marks every publish of a publisher as a hop of the given kind for
// the publish hooks (a replay publishes with AsHop(mq.OutcomeReplay)). It
// implies mq.Mandatory.
func AsHop(kind mq.Outcome) mq.PublisherOption {
	return link.AsHop.(func(mq.Outcome) mq.PublisherOption)(kind)
}

// IsMandatory reports whether a publisher given opts is mandatory, as
// Broker.Publisher builds it.
func IsMandatory(opts ...mq.PublisherOption) bool {
	return link.IsMandatory.(func(...mq.PublisherOption) bool)(opts...)
}

// RetryPolicy is the policy of the first handler in s's chain that runs
// one, or the zero policy (one attempt) if none does.
func RetryPolicy(s *mq.Subscription) retry.Policy {
	return link.PolicyOf.(func(*mq.Subscription) retry.Policy)(s)
}

// Runtime is what carries out a delivery's decisions: a consumer's session
// is one, and a fake (package mqtest) is another, so a test runs the same
// decision path (a Runner) as production. It must be safe for concurrent
// use.
type Runtime interface {
	// Hop publishes m to queue through the default exchange, mandatory,
	// and returns once the broker confirmed it: mq.ErrUnroutable when no
	// queue took it. kind says which hop it is, for the publish hooks.
	Hop(ctx context.Context, queue string, kind mq.Outcome, m mq.Message) error
	// Wait waits w before d's next attempt: nil once waited, an error when
	// the wait was cut short.
	Wait(ctx context.Context, d *mq.Delivery, w time.Duration) error
	// Event reports e to the EventHooks.
	Event(ctx context.Context, e mq.Event)
	// Logger is the consumer's logger.
	Logger() *slog.Logger
}

// NewDelivery builds a delivery of raw from queue, outside any consumer,
// whose decisions rt carries out (nil: hops fail with mq.ErrClosed, waits
// sleep, events go nowhere).
func NewDelivery(queue string, raw amqp.Delivery, rt Runtime) *mq.Delivery {
	var r any
	if rt != nil {
		r = rt
	}
	return link.NewDelivery.(func(string, amqp.Delivery, any) *mq.Delivery)(queue, raw, r)
}

// Runner runs a handler inside its middleware for one delivery at a time
// and carries out what the chain decides through the delivery's Runtime,
// as Broker.Consume does.
type Runner interface {
	// Deliver runs the chain for d and carries out what it decides, until
	// d's fate is settled; it returns the error d is settled with (nil:
	// acknowledged; an mq.ErrRequeue: returned to its queue; any other:
	// rejected).
	Deliver(ctx context.Context, d *mq.Delivery) error
	// RetryPolicy is the policy of the first middleware in the chain that
	// runs one, and whether one does.
	RetryPolicy() (retry.Policy, bool)
}

// NewRunner builds the runner Broker.Consume builds for h from opts (only
// the middleware matters), with hooks around each attempt. An invalid
// option is an error, and so is a middleware that takes its policy from
// the Broker's declaration (a runner has no Broker).
func NewRunner(h mq.Handler, hooks []mq.AttemptHook, opts ...mq.ConsumerOption) (Runner, error) {
	r, err := link.NewRunner.(func(mq.Handler, []mq.AttemptHook, ...mq.ConsumerOption) (any, error))(h, hooks, opts...)
	if err != nil {
		return nil, err
	}
	return r.(Runner), nil
}
