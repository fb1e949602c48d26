package mqtest

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/mq"
)

// Epoch is where a Consumer's fake clock starts.
var Epoch = time.Date(2026, time.January, 1, 0, 0, 0, 0, time.UTC)

// maxRun bounds Run: a message that keeps hopping longer than this is a
// bug in the policy or the test, reported instead of looping.
const maxRun = 1000

// Consumer runs one handler for one queue the way a consumer would, with
// the broker replaced by a recorder and time by a fake clock. Build it with
// New. It is safe for concurrent use, but a test usually delivers one
// message at a time. What its deliveries log is discarded: a test of a
// record builds its delivery with NewDelivery and Logger.
type Consumer struct {
	tb     testing.TB
	queue  string
	runner *mq.Runner

	mu     sync.Mutex
	now    time.Time
	tag    uint64
	hops   []Hop
	refuse map[string]error
}

// Hop is one publish the library made: a retry to a rung, a dead letter,
// a park.
type Hop struct {
	// Queue is the target queue (routing key on the default exchange).
	Queue string
	// Kind says which hop it was.
	Kind mq.Outcome
	// Message is the message exactly as it would have been published.
	Message mq.Message
	// At is the fake clock's time of the hop.
	At time.Time
}

// Attempt is the x-acemq-attempt the hop carries: the attempt its next
// delivery is.
func (h Hop) Attempt() int { return mq.AttemptOf(h.Message.Headers) }

// Reason is the x-acemq-reason the hop carries ("" on a retry).
func (h Hop) Reason() mq.Reason {
	s, _ := h.Message.Headers[mq.HeaderReason].(string)
	return mq.Reason(s)
}

// Error is the x-acemq-error the hop carries: the handler's error text.
func (h Hop) Error() string {
	s, _ := h.Message.Headers[mq.HeaderError].(string)
	return s
}

// Result is what became of one delivery.
type Result struct {
	// Outcome is how the consumer runtime would settle the delivery:
	// mq.OutcomeAck, OutcomeRetry (to a broker rung), OutcomeDeadLetter,
	// OutcomePark, OutcomeRequeue or OutcomeReject.
	Outcome mq.Outcome
	// Err is what the middleware chain returned (nil when acknowledged)
	// or, when the chain settled the delivery itself with a hop (to a
	// rung, .dlq or .parked) and returned nil, the cause it hopped for:
	// the handler's last error, a panic's *mq.PanicError. So a panic under
	// middleware.Standard shows here, not only in the hop's x-acemq-error.
	Err error
	// Attempts is how many times the handler was called for this delivery
	// (in-process retries included).
	Attempts int
	// Waits are the in-process retry waits, in order; the fake clock
	// advanced by each instead of sleeping.
	Waits []time.Duration
	// Hops are the publishes the library made for this delivery.
	Hops []Hop
	// Events are the events the middleware reported (mq.Event*).
	Events []mq.Event
}

// New builds a Consumer for queue running h inside the chain
// Broker.Consume builds from opts (only the middleware matters here:
// mq.WithMiddleware, middleware.Standard). An invalid option, or a retry
// policy the ladder would refuse, fails tb. A nil tb (in an Example)
// panics instead, and deliveries run on context.Background().
func New(tb testing.TB, queue string, h mq.Handler, opts ...mq.ConsumerOption) *Consumer {
	c := &Consumer{tb: tb, queue: queue, now: Epoch, refuse: map[string]error{}}
	if tb != nil {
		tb.Helper()
	}
	if h == nil {
		c.fatalf("mqtest.New: the handler is nil")
	}
	r, err := mq.NewRunner(h, []mq.AttemptHook{counterHook{}}, opts...)
	if err != nil {
		c.fatalf("mqtest.New: consumer of %q: %v", queue, err)
	}
	if p, ok := r.RetryPolicy(); ok {
		if err := p.Validate(); err != nil {
			c.fatalf("mqtest.New: consumer of %q: %v", queue, err)
		}
	}
	c.runner = r
	return c
}

func (c *Consumer) fatalf(format string, args ...any) {
	if c.tb == nil {
		panic(fmt.Sprintf(format, args...))
	}
	c.tb.Helper()
	c.tb.Fatalf(format, args...)
}

func (c *Consumer) context() context.Context {
	if c.tb == nil {
		return context.Background()
	}
	return c.tb.Context()
}

// Now is the fake clock's time: Epoch plus every wait so far.
func (c *Consumer) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Refuse makes every hop to queue fail with err: mq.ErrUnroutable for a
// queue that does not exist (a missing rung), any other error for a
// publish that fails.
func (c *Consumer) Refuse(queue string, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.refuse[queue] = err
}

// Hops is every hop so far, across deliveries, in order.
func (c *Consumer) Hops() []Hop {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Hop(nil), c.hops...)
}

// Deliver hands m to the chain as one delivery from the consumer's queue
// (its attempt read from m's x-acemq-attempt, as a consumer reads it) and
// returns what became of it.
func (c *Consumer) Deliver(m mq.Message) Result {
	return c.deliver(m, "", c.queue)
}

// Run delivers m and follows it: each time it goes to a broker rung, the
// fake clock advances by the rung's wait and the hop is delivered again,
// as the rung would bring it home, until it settles otherwise (ack, .dlq,
// .parked, requeue, reject). It returns every delivery's result in order;
// the last says where the message ended.
func (c *Consumer) Run(m mq.Message) []Result {
	if c.tb != nil {
		c.tb.Helper()
	}
	var out []Result
	exchange := ""
	for range maxRun {
		r := c.deliver(m, exchange, c.queue)
		out = append(out, r)
		if r.Outcome != mq.OutcomeRetry {
			return out
		}
		hop, wait := r.Hops[len(r.Hops)-1], time.Duration(0)
		for _, e := range r.Events {
			if e.Name == mq.EventRetry && e.Kind == "broker" {
				wait = e.Wait
			}
		}
		c.advance(wait)
		m, exchange = hop.Message, "acemq.retry"
	}
	c.fatalf("mqtest.Run: message still hopping after %d deliveries", maxRun)
	return out
}

func (c *Consumer) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func (c *Consumer) deliver(m mq.Message, exchange, key string) (r Result) {
	c.mu.Lock()
	c.tag++
	tag := c.tag
	c.mu.Unlock()
	raw := amqp.Delivery{
		Headers: maps.Clone(m.Headers), ContentType: m.ContentType, ContentEncoding: m.ContentEncoding,
		DeliveryMode: m.DeliveryMode, Priority: m.Priority, CorrelationId: m.CorrelationId, ReplyTo: m.ReplyTo,
		Expiration: m.Expiration, MessageId: m.MessageId, Timestamp: m.Timestamp, Type: m.Type, UserId: m.UserId,
		AppId: m.AppId, Body: m.Body, DeliveryTag: tag, Exchange: exchange, RoutingKey: key,
	}
	var mu sync.Mutex // the handler may hop from goroutines of its own
	// wait is the fake clock: an in-process retry wait advances it.
	wait := func(ctx context.Context, w time.Duration) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		mu.Lock()
		r.Waits = append(r.Waits, w)
		mu.Unlock()
		c.advance(w)
		return nil
	}
	d := mq.NewDelivery(c.queue, raw, &runtime{
		log:  slog.New(slog.DiscardHandler), // what Logging and the ladder write goes nowhere
		wait: wait,
		hop: func(ctx context.Context, queue string, kind mq.Outcome, m mq.Message) error {
			c.mu.Lock()
			defer c.mu.Unlock()
			if err, ok := c.refuse[queue]; ok {
				return err
			}
			h := Hop{Queue: queue, Kind: kind, Message: m, At: c.now}
			c.hops = append(c.hops, h)
			mu.Lock()
			r.Hops = append(r.Hops, h)
			mu.Unlock()
			return nil
		},
		emit: func(ctx context.Context, e mq.Event) {
			mu.Lock()
			r.Events = append(r.Events, e)
			mu.Unlock()
		},
	})
	counted := attemptCounter{n: &r.Attempts, mu: &mu}
	// The same decision path as a consumer's (mq.Runner): a panic that
	// escapes every middleware is a requeue, never a reject.
	err := c.runner.Deliver(withCounter(c.context(), counted), d)
	mu.Lock()
	defer mu.Unlock()
	r.Err = err
	r.Outcome = d.Outcome()
	if err == nil && (r.Outcome == mq.OutcomeRetry || r.Outcome == mq.OutcomeDeadLetter || r.Outcome == mq.OutcomePark) {
		r.Err = d.Cause()
	}
	return r
}

// String is a one-line summary of r, for test failures.
func (r Result) String() string {
	s := fmt.Sprintf("%s after %d attempt(s)", r.Outcome, r.Attempts)
	for _, h := range r.Hops {
		s += fmt.Sprintf(", %s to %s (attempt %d)", h.Kind, h.Queue, h.Attempt())
	}
	if r.Err != nil {
		s += ": " + r.Err.Error()
	}
	return s
}

// attemptCounter counts one delivery's handler calls.
type attemptCounter struct {
	n  *int
	mu *sync.Mutex
}

type counterKey struct{}

func withCounter(ctx context.Context, c attemptCounter) context.Context {
	return context.WithValue(ctx, counterKey{}, c)
}

// counterHook is the AttemptHook New builds the chain with: it counts the
// calls into the counter of the delivery's context.
type counterHook struct{}

func (counterHook) OnAttempt(ctx context.Context, d *mq.Delivery) context.Context {
	if c, ok := ctx.Value(counterKey{}).(attemptCounter); ok {
		c.mu.Lock()
		*c.n++
		c.mu.Unlock()
	}
	return ctx
}

func (counterHook) OnAttemptDone(context.Context, *mq.Delivery, error) {}
