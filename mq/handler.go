package mq

import (
	"context"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/retry"
)

// Handler handles one delivery. Its error decides the outcome: nil
// acknowledges the message; an error is for the middleware to act on (the
// retry ladder, parking); an error that escapes every middleware rejects
// the message without requeue (the broker's own dead-letter route, if the
// queue has one), and one wrapped with Requeue returns it to its queue.
// Settlement belongs to the runtime, never to the handler.
type Handler interface {
	Handle(ctx context.Context, d *Delivery) error
}

// HandlerFunc adapts a function to a Handler.
type HandlerFunc func(ctx context.Context, d *Delivery) error

// Handle calls f(ctx, d).
func (f HandlerFunc) Handle(ctx context.Context, d *Delivery) error { return f(ctx, d) }

// Middleware wraps a Handler, as net/http middleware wraps an http.Handler.
// The Handler a middleware returns may also implement Subscriber and
// Stopper to take part in its consumer's lifecycle.
type Middleware func(Handler) Handler

// Chain wraps h in mws, the first outermost: Chain(h, a, b) is a(b(h)).
func Chain(h Handler, mws ...Middleware) Handler {
	h, _ = chain(h, mws)
	return h
}

// chain also returns every handler a middleware built, outermost first. A
// nil middleware is skipped (listing the handler inside it in its place
// would run that handler's Subscribe and Stop hooks twice).
func chain(h Handler, mws []Middleware) (Handler, []Handler) {
	built := make([]Handler, 0, len(mws))
	for i := len(mws) - 1; i >= 0; i-- {
		if mws[i] == nil {
			continue
		}
		h = mws[i](h)
		built = append(built, h)
	}
	slices.Reverse(built)
	return h, built
}

// Subscriber is implemented by a Handler (as a middleware returns it) that
// has work to do before its consumer subscribes: on the first subscribe and
// again on every resubscribe after a reconnect. Declaring the queues a
// middleware publishes to belongs here. An error stops the subscribe: the
// first one fails Consume, later ones are retried with backoff.
type Subscriber interface {
	Subscribe(ctx context.Context, s *Subscription) error
}

// Stopper is implemented by a Handler that has work to do when its consumer
// stops, after the last delivery is settled.
type Stopper interface {
	Stop(ctx context.Context) error
}

// PolicyHolder is implemented by a Handler that runs a retry policy (the
// retry ladder). Subscription.RetryPolicy reads it, so the queues declared
// for a consumer derive from the policy it runs, never from a second list.
type PolicyHolder interface {
	RetryPolicy() retry.Policy
}

// Subscription is what a Subscriber learns about the consumer it belongs to.
type Subscription struct {
	// Queue is the queue consumed.
	Queue string
	// Broker is the consumer's broker.
	Broker *Broker
	// Logger is the consumer's logger.
	Logger *slog.Logger
	// Resubscribe is false on the first subscribe, true after a reconnect.
	Resubscribe bool

	handlers []Handler
}

// Handlers returns the consumer's middleware handlers, outermost first.
func (s *Subscription) Handlers() []Handler { return append([]Handler(nil), s.handlers...) }

// RetryPolicy returns the policy of the first handler in the chain that
// runs one (a PolicyHolder), or the zero policy (one attempt) if none does.
func (s *Subscription) RetryPolicy() retry.Policy {
	if ph := policyHolder(s.handlers); ph != nil {
		return ph.RetryPolicy()
	}
	return retry.Policy{}
}

// policyHolder is the first of hs that runs a retry policy, or nil: the
// one whose policy the consumer's queues are declared for.
func policyHolder(hs []Handler) PolicyHolder {
	for _, h := range hs {
		if ph, ok := h.(PolicyHolder); ok {
			return ph
		}
	}
	return nil
}

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
	sub     *subscription
	lane    *lane // the channel it came on, where it is settled
	c       *Consumer
	slot    bool // holds one of its subscription's slots
	used    int  // the last attempt that ran to its end (see finished)

	// Test seams (package mqtest sets them through internal/seam).
	forward func(ctx context.Context, queue string, kind HopKind, m Message) error
	log     *slog.Logger
	emit    func(ctx context.Context, e Event)
	wait    func(ctx context.Context, w time.Duration) error
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
func (d *Delivery) Draining() <-chan struct{} {
	if d.sub == nil {
		return nil
	}
	return d.sub.draining
}

// Logger is the consumer's logger.
func (d *Delivery) Logger() *slog.Logger {
	switch {
	case d.log != nil:
		return d.log
	case d.c != nil:
		return d.c.log
	}
	return slog.Default()
}

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
	switch {
	case d.forward != nil:
		return d.forward(ctx, queue, kind, m)
	case d.c == nil:
		return ErrClosed
	}
	return d.c.hops().publish(ctx, queue, m, kind)
}

// Emit reports an event to the broker's EventHooks.
func (d *Delivery) Emit(ctx context.Context, e Event) {
	if e.Queue == "" {
		e.Queue = d.queue
	}
	switch {
	case d.emit != nil:
		d.emit(ctx, e)
	case d.c != nil:
		d.c.b.hooks.emit(ctx, e)
	}
}

// Server is host:port of the connection the delivery came on.
func (d *Delivery) Server() string {
	if d.sub == nil {
		return ""
	}
	return d.sub.st.server
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
