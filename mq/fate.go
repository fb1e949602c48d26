package mq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/retry"
	"github.com/acemq/acemq-go/topology"
)

// Decision is what a middleware decided for a delivery. The middleware
// returns it as its error, and the consumer carries it out at once, at
// that middleware's boundary: the middleware never publishes, waits,
// settles or reports anything itself, and the middleware outside it sees
// what became of the delivery (nil and d.Outcome() once a hop is
// confirmed, Requeue's error and OutcomeRequeue for a requeue), never the
// decision. By Outcome:
//
//   - OutcomeRetry with a Queue: hop the message to that queue (a broker
//     rung, or the queue itself) with x-acemq-attempt the next attempt and
//     x-acemq-source-queue, and acknowledge the original once the hop is
//     confirmed. Wait is the rung's wait, for the event.
//   - OutcomeRetry without a Queue: wait Wait in-process (the delivery
//     stays unacknowledged and its worker goes on with the queue), then
//     call the middleware that decided again, as the next attempt, and
//     carry out what that decides; the middleware outside it sees one
//     call per delivery. A wait cut short by
//     Stop hops the message to its own queue with the next attempt
//     instead; under InOrder it returns the original, which keeps its
//     place (see InOrder).
//   - OutcomeDeadLetter, OutcomePark: hop the message to Queue (its .dlq,
//     its .parked) with the contract's failure headers and Reason, and
//     acknowledge the original once the hop is confirmed.
//   - OutcomeRequeue: return the message to its queue (see Requeue).
//   - OutcomeReject: reject it without requeue. The reject is made when
//     the decision reaches the consumer: the middleware outside sees it,
//     and d.Outcome() reads OutcomeReject.
//   - OutcomeAck: acknowledge it (as a nil error does).
//
// A hop the broker refuses (a nack, or a .dlq or .parked that does not
// exist) is kept pending: the copy goes to the delivery's own queue with
// headerPendingHop naming its target, and its next delivery makes that hop
// instead of calling the chain; the middleware outside sees nil and
// OutcomeRequeue.
//
// Cause is the handler's error that led to the decision; hooks and
// Logging report it.
type Decision struct {
	Outcome Outcome
	Queue   string
	Wait    time.Duration
	Reason  Reason
	Cause   error
}

// Error describes the decision (a requeue reads as Requeue's error).
func (d *Decision) Error() string {
	if d.Outcome == OutcomeRequeue {
		return (&requeueError{err: d.Cause}).Error()
	}
	s := "mq: " + string(d.Outcome)
	if d.Queue != "" {
		s += " to " + d.Queue
	}
	if d.Cause != nil {
		s += ": " + d.Cause.Error()
	}
	return s
}

// Unwrap is the cause, and ErrRequeue for a requeue.
func (d *Decision) Unwrap() []error {
	if d.Outcome == OutcomeRequeue {
		return []error{ErrRequeue, d.Cause}
	}
	return []error{d.Cause}
}

// Runtime is what carries out a delivery's decisions, as amqp091-go's
// Acknowledger settles its deliveries: a consumer's session is one, and a
// fake (package mqtest) is another, so a test runs the same decision path
// (Runner) as production. A delivery built with NewDelivery asks its
// Runtime; a Runtime must be safe for concurrent use.
type Runtime interface {
	// Hop publishes m to queue through the default exchange, mandatory,
	// and returns once the broker confirmed it: ErrUnroutable when no
	// queue took it. kind says which hop it is, for the publish hooks.
	Hop(ctx context.Context, queue string, kind Outcome, m Message) error
	// Wait waits w before d's next attempt: nil once waited, an error when
	// the wait was cut short (the consumer stops, ctx ends).
	Wait(ctx context.Context, d *Delivery, w time.Duration) error
	// Event reports e to the EventHooks.
	Event(ctx context.Context, e Event)
	// Logger is the consumer's logger.
	Logger() *slog.Logger
}

// NewDelivery builds a delivery of raw from queue, outside any consumer,
// whose decisions rt carries out (nil: hops fail with ErrClosed, waits
// sleep, events go nowhere). Its attempt is raw's x-acemq-attempt (a
// consumer also counts a quorum queue's returns past the first two and the
// attempts of a message it returned itself); its exchange and routing key
// are the original ones a hop recorded.
func NewDelivery(queue string, raw amqp.Delivery, rt Runtime) *Delivery {
	raw.Acknowledger = nil
	restoreOrigin(&raw)
	d := received(raw)
	d.queue, d.attempt, d.from = queue, AttemptOf(raw.Headers), rt
	return d
}

// Runner runs a handler inside its middleware for one delivery at a time
// and carries out what the chain decides (a Decision) through the
// delivery's Runtime: the consumer runs every delivery through one, and a
// fake consumer (package mqtest) through another built the same way.
type Runner struct {
	handler Handler   // the chain, attempt counting innermost
	built   []Handler // what each middleware built, outermost first
}

// NewRunner builds the runner Broker.Consume builds for h from opts (only
// the middleware matters here): the middleware around h, and innermost the
// attempt counter, which numbers every call of h after the first as the
// next attempt and runs hooks around each. An invalid option is an error,
// as it is for Consume, and so is a policyTaker (a runner has no Broker to
// take the declared policy from).
func NewRunner(h Handler, hooks []AttemptHook, opts ...ConsumerOption) (*Runner, error) {
	var cfg consumerConfig
	for _, o := range opts {
		if o != nil {
			o.applyConsumer(&cfg)
		}
	}
	if err := errors.Join(cfg.errs...); err != nil {
		return nil, err
	}
	r := newRunner(h, hooks, cfg.mws)
	if err := takePolicies(r.built, "", retry.Policy{}, false); err != nil {
		return nil, fmt.Errorf("%w: outside a Broker nothing declares a policy; give it (middleware.Standard(policy))", ErrInvalid)
	}
	return r, nil
}

func newRunner(h Handler, hooks []AttemptHook, mws []Middleware) *Runner {
	r := &Runner{}
	inner := &carrier{next: &attemptHandler{next: h, hooks: hooks}}
	var carriers []*carrier
	r.handler, r.built, carriers = chainCarried(inner, mws)
	carriers = append(carriers, inner)
	// A set-aside remembered without the carrier that made it is made
	// again just outside the retry policy's middleware, or next to the
	// handler when no middleware runs one.
	fallback := len(carriers) - 1
	for i, b := range r.built {
		if _, ok := b.(policyRunner); ok {
			fallback = i
			break
		}
	}
	for i, c := range carriers {
		c.at, c.fallback = i, i == fallback
	}
	return r
}

// RetryPolicy is the policy of the first middleware in the chain that runs
// one (a retry ladder), and whether one does; for a nil Runner, none. It is
// the one way to learn the policy a consumer runs: before it runs
// (fxmodule, mqtest) and on every subscribe ([Subscription].Runner).
func (r *Runner) RetryPolicy() (retry.Policy, bool) {
	if r == nil {
		return retry.Policy{}, false
	}
	if ph := policyHolder(r.built); ph != nil {
		return ph.RetryPolicy(), true
	}
	return retry.Policy{}, false
}

// Deliver runs the chain for d and carries out what it decides, through
// d's Runtime, until d's fate is settled: each middleware's decision is
// carried out just outside that middleware (it waits and calls the
// middleware again, hops and reports), so the middleware outside it sees
// nil and d.Outcome() after a hop, and one call per delivery. It returns
// the error the delivery is settled with (nil: acknowledged, a hop's
// included; an ErrRequeue: returned to its queue; any other: rejected),
// and d.Outcome says which.
//
// A delivery whose attempts were used on an earlier delivery, and whose
// set-aside failed then, passes the middleware outside the one that
// decided it, and the set-aside is made again in that one's place: the
// handler is not called again.
//
// A fate carried out (a confirmed hop: a rung, a carry, .dlq, .parked)
// stands whatever happens after it: a panic or an error from a
// middleware outside is logged, and the original is acknowledged; and
// if that ack is lost with the connection, the consumer knows the
// original's redelivery, which passes the middleware outside the one
// that decided, reads the same outcome and is acknowledged (a consumer
// in another process handles it again: at least once). A panic that
// escapes every middleware before that is recovered as a requeue, never
// a reject.
func (r *Runner) Deliver(ctx context.Context, d *Delivery) error {
	rt := d.runtime()
	// An earlier delivery decided its fate and the hop was refused (the
	// consumer remembers it, or the copy names it: headerPendingHop): a
	// carrier makes that hop again, never another attempt.
	d.aside = d.pendingFate()
	err := invoke(ctx, r.handler, d, rt)
	if d.carriedOut() {
		if err != nil {
			if _, panicked := errors.AsType[*PanicError](err); !panicked { // a panic is logged already
				rt.Logger().WarnContext(ctx, "acemq.message.kept", "message_id", d.MessageId,
					"outcome", string(d.outcome), "error", err)
			}
		}
		return d.settled(nil)
	}
	if err == nil {
		return d.settled(nil)
	}
	// The chain is a carrier outermost, which carried out every decision
	// but a reject: that one reaches here, to be settled with its cause.
	if dec := decisionOf(err); dec != nil {
		err = dec.Cause
		if err == nil {
			err = dec
		}
	}
	return d.settled(err)
}

// carrier is what a consumer's chain puts just outside each middleware:
// it carries out the decision the middleware returns, through the
// delivery's Runtime, and returns what a middleware returned before
// decisions existed (nil once a hop is confirmed, with d.Outcome() saying
// which; an ErrRequeue for a requeue), so the middleware outside sees a
// delivery's fate, once per delivery. A reject is the consumer's to carry
// out: it passes up as the decision. Whatever it returns, d.Outcome() is
// then the outcome that error settles the delivery with (settled).
type carrier struct {
	next     Handler
	at       int  // its place in the chain: 0 outermost
	fallback bool // where a set-aside remembered without its place is made again
}

// Handle calls the middleware, and calls it again as the next attempt
// after each in-process wait it decides, until it decides something else,
// and carries that out. It returns nil for an ack or a confirmed hop
// (d.Outcome() says which), Requeue's error for a requeue or a hop that
// failed, the decision itself for a reject, and any other error the
// middleware returns. A hop this carrier made and the broker refused, on
// an earlier delivery of the message, it makes again without calling the
// middleware; a refused hop named by the copy (headerPendingHop), whose
// carrier is not known, is made by the carrier outside the retry policy's
// middleware.
func (c *carrier) Handle(ctx context.Context, d *Delivery) error {
	if a := d.aside; a != nil && (a.at == c.at+1 || (a.at == 0 && c.fallback)) {
		return c.done(d, a.redo(ctx, d, d.runtime()))
	}
	for {
		err := c.next.Handle(ctx, d)
		if err == nil {
			return d.settled(nil)
		}
		dec := decisionOf(err)
		if dec == nil {
			return d.settled(err)
		}
		rt := d.runtime()
		switch dec.Outcome {
		case OutcomeAck:
			d.outcome, d.cause = OutcomeAck, dec.Cause
			return nil
		case OutcomeRequeue:
			return d.settled(Requeue(dec.Cause))
		case OutcomeDeadLetter, OutcomePark:
			return c.done(d, setAside(ctx, d, rt, dec.Queue, dec.Outcome, dec.Reason, dec.Cause))
		case OutcomeRetry:
			if dec.Queue != "" {
				return c.done(d, toRung(ctx, d, rt, dec))
			}
			rt.Logger().DebugContext(ctx, EventRetry, "message_id", d.MessageId, "attempt", d.Attempt(),
				"kind", kindInProcess, "wait", dec.Wait, "error", dec.Cause)
			rt.Event(ctx, Event{Name: EventRetry, Queue: d.queue, Kind: kindInProcess, Attempt: d.Attempt(), Wait: dec.Wait, Err: dec.Cause})
			if werr := rt.Wait(ctx, d, dec.Wait); werr != nil {
				return c.done(d, carry(ctx, d, rt, dec.Cause))
			}
		default: // OutcomeReject, or none given
			d.outcome, d.cause = OutcomeReject, dec.Cause
			if dec.Cause == nil {
				d.cause = dec
			}
			return dec
		}
	}
}

// done is what a hop this carrier made leaves: a set-aside that failed is
// remembered as this carrier's, to be made again here; a hop confirmed
// is remembered by the consumer as this carrier's fate carried out, for
// the original's redelivery should its ack be lost (rememberHop).
func (c *carrier) done(d *Delivery, err error) error {
	switch {
	case err == nil && d.carriedOut():
		if cr := d.consumer(); cr != nil {
			cr.hopped(d, c.at+1)
		}
	case err != nil && d.asideFailed && d.aside != nil:
		d.aside.at = c.at + 1
	}
	return d.settled(err)
}

// decisionOf is the Decision err carries, or nil. It allocates nothing
// (errors.As would, for its target): the carrier outside every middleware
// asks it of each error passing up.
func decisionOf(err error) *Decision {
	dec, _ := errors.AsType[*Decision](err)
	return dec
}

// invoke calls h once; a panic that escaped every middleware is a
// requeue (on a queue with no dead-letter route a reject would drop the
// message), unless the delivery's fate was carried out already (a
// confirmed hop): then it is logged, and Deliver acknowledges the
// original.
func invoke(ctx context.Context, h Handler, d *Delivery, rt Runtime) (err error) {
	defer func() {
		if v := recover(); v != nil {
			pe := newPanicError(v)
			rt.Logger().Error("acemq.handler.panic", "message_id", d.MessageId, "panic", fmt.Sprint(v),
				"outcome", string(d.outcome), "stack", string(pe.Stack))
			err = Requeue(pe)
		}
	}()
	return h.Handle(ctx, d)
}

// carriedOut reports whether o is a fate the library has carried out
// already, a confirmed hop (a rung, a carry, .dlq, .parked), which
// nothing after it may undo: the original is acknowledged.
func (o Outcome) carriedOut() bool {
	return o == OutcomeRetry || o == OutcomeDeadLetter || o == OutcomePark
}

// carriedOut reports whether d's fate was carried out already: a confirmed
// hop, or a confirmed copy in its own queue that carries a refused hop
// (see refused), which reads OutcomeRequeue. Nothing after it undoes it.
func (d *Delivery) carriedOut() bool {
	return d.outcome.carriedOut() || (d.homeCopy && d.outcome == OutcomeRequeue)
}

// settled records the outcome err settles d with, and returns err: nil is
// an ack (or the hop carried out), an ErrRequeue a requeue, and any other
// error a reject, unless the consumer has cut its handlers short (a lost
// channel, a stop deadline): then the broker gets the message back, a
// requeue.
func (d *Delivery) settled(err error) error {
	switch {
	case err == nil:
		if !d.carriedOut() && d.outcome != OutcomeAck {
			d.outcome, d.cause = OutcomeAck, nil
		}
	case d.carriedOut():
		// A fate carried out stands (Deliver acknowledges it).
	case errors.Is(err, ErrRequeue):
		d.outcome, d.cause = OutcomeRequeue, err
	default:
		d.outcome, d.cause = OutcomeReject, err
		if cr := d.consumer(); cr != nil && cr.cutShort() {
			d.outcome = OutcomeRequeue
		}
	}
	return err
}

// carry keeps the attempts of a delivery whose in-process wait was cut
// short. While its channel lives (the consumer is stopping), the message
// goes back to its own queue as a copy whose x-acemq-attempt is the next
// attempt, confirmed before the original is acknowledged. Otherwise it is
// returned as it is, and the consumer's memory or the broker's delivery
// count carry the attempt.
//
// Under InOrder a copy would go to the tail of the queue, behind what
// waited behind the message: so the original goes back itself, with
// basic.nack, and keeps its place (see InOrder). Its attempt is not
// carried: its next delivery runs the attempt it ended again.
func carry(ctx context.Context, d *Delivery, rt Runtime, cause error) error {
	if ctx.Err() != nil {
		return Requeue(cause)
	}
	if cr := d.consumer(); cr != nil && cr.keepsOrder() {
		d.kept = true
		return Requeue(fmt.Errorf("wait cut short, back in its place (InOrder): %w", cause))
	}
	next := d.Attempt() + 1
	m := d.hopMessage()
	m.Headers[HeaderAttempt] = attemptValue(next)
	m.Headers[HeaderSourceQueue] = d.queue
	if err := rt.Hop(ctx, d.queue, OutcomeRetry, m); err != nil {
		return Requeue(fmt.Errorf("keep attempt %d through %s: %w", next, d.queue, err))
	}
	rt.Event(ctx, Event{Name: EventRetry, Queue: d.queue, Kind: kindCarried, Target: d.queue, Attempt: d.Attempt(), Err: cause})
	d.outcome, d.cause = OutcomeRetry, cause
	return nil
}

// toRung hops d to the broker rung dec names. A rung that does not exist
// (the hop comes back unroutable) is reported and the message set aside in
// its .dlq instead (reason rung-missing); any other failure returns it to
// its queue.
func toRung(ctx context.Context, d *Delivery, rt Runtime, dec *Decision) error {
	m := d.hopMessage()
	m.Headers[HeaderAttempt] = attemptValue(d.Attempt() + 1)
	m.Headers[HeaderSourceQueue] = d.queue
	err := rt.Hop(ctx, dec.Queue, OutcomeRetry, m)
	switch {
	case err == nil:
		rt.Event(ctx, Event{Name: EventRetry, Queue: d.queue, Kind: kindBroker, Target: dec.Queue, Attempt: d.Attempt(), Wait: dec.Wait, Err: dec.Cause})
		d.outcome, d.cause = OutcomeRetry, dec.Cause
		return nil
	case errors.Is(err, ErrUnroutable):
		rt.Logger().WarnContext(ctx, EventRungMissing, "message_id", d.MessageId, "rung", dec.Queue,
			"attempt", d.Attempt(), "error", dec.Cause)
		rt.Event(ctx, Event{Name: EventRungMissing, Queue: d.queue, Target: dec.Queue, Attempt: d.Attempt(), Err: dec.Cause})
		return setAside(ctx, d, rt, topology.DeadLetterQueue(d.queue), OutcomeDeadLetter, ReasonRungMissing, dec.Cause)
	default:
		return refused(ctx, d, rt, &asideRetry{target: dec.Queue, outcome: OutcomeRetry, wait: dec.Wait, cause: dec.Cause}, m, err)
	}
}

// setAside hops d to target (its .dlq or .parked) with the contract's
// failure headers and acknowledges it once confirmed. When that hop fails,
// it reports EventSetAsideFailed and returns the original to its queue,
// never acknowledged, with basic.nack after a pause that grows with its
// returns (the library's failure, not the message's: see asidePause).
func setAside(ctx context.Context, d *Delivery, rt Runtime, target string, o Outcome, reason Reason, cause error) error {
	kind := OutcomeDeadLetter
	if o == OutcomePark {
		kind = OutcomePark
	}
	if target == "" {
		target = topology.DeadLetterQueue(d.queue)
		if o == OutcomePark {
			target = topology.ParkedQueue(d.queue)
		}
	}
	m := d.hopMessage()
	m.Headers[HeaderAttempt] = attemptValue(d.Attempt() + 1)
	m.Headers[HeaderSourceQueue] = d.queue
	m.Headers[HeaderReason] = string(reason)
	m.Headers[HeaderError] = ErrorText(cause)
	m.Headers[HeaderFailedAt] = time.Now().UTC().Truncate(time.Second)
	if err := rt.Hop(ctx, target, kind, m); err != nil {
		causeText := "<nil>"
		if cause != nil {
			causeText = cause.Error()
		}
		rt.Logger().ErrorContext(ctx, EventSetAsideFailed, "message_id", d.MessageId, "target", target,
			"reason", string(reason), "cause", causeText, "error", err)
		rt.Event(ctx, Event{Name: EventSetAsideFailed, Queue: d.queue, Target: target, Attempt: d.Attempt(), Err: err})
		return refused(ctx, d, rt, &asideRetry{target: target, outcome: o, reason: reason, cause: cause}, m, err)
	}
	d.outcome, d.cause = o, cause
	return nil
}

// refused is what follows a hop the broker refused (a nack: a full queue
// with reject-publish, a node down): the message must make that hop, not
// another attempt, and not before the pause. The copy the hop would have
// made (m) goes to d's own queue instead, naming its target in
// headerPendingHop, confirmed before the original is acknowledged: the
// fate travels with the message, so a restart or a kill -9 cannot forget
// it, and its next delivery makes the hop again (pendingFate). When d is
// such a copy already, or that publish fails too, or the delivery's
// channel is lost (ctx ended: the broker returns the original itself),
// the original goes back to its queue with basic.nack after the growing
// pause (asidePause), remembered by the consumer (attemptMemo) for as long
// as it lives.
func refused(ctx context.Context, d *Delivery, rt Runtime, a *asideRetry, m Message, err error) error {
	if !d.pending && ctx.Err() == nil {
		m.Headers = cloneHeaders(m.Headers) // the refused copy is not changed
		m.Headers[headerPendingHop] = a.target
		// A channel lost meanwhile (ctx ended) returns the original too:
		// it then goes the way below as well, so that it does not reach
		// the handler again (both make the hop: a duplicate, as a hop may).
		if herr := rt.Hop(ctx, d.queue, OutcomeRequeue, m); herr == nil && ctx.Err() == nil {
			rt.Logger().WarnContext(ctx, EventRequeued, "message_id", d.MessageId, "attempt", d.Attempt(),
				"why", kindCarried, "pending_hop", a.target, "error", err)
			rt.Event(ctx, Event{Name: EventRequeued, Queue: d.queue, Kind: kindCarried, Target: a.target, Attempt: d.Attempt(), Err: err})
			d.outcome, d.cause, d.homeCopy = OutcomeRequeue, a.cause, true
			return nil
		}
	}
	d.asideFailed = true
	if !d.pending {
		d.aside = a
	}
	return Requeue(fmt.Errorf("hop to %s: %w", a.target, err))
}

// asideRetry is a hop that was refused, to make again when the message
// comes back (see attemptMemo and pendingFate): where to, which outcome
// (a set-aside, or a retry through a rung), the reason, the rung's wait,
// and the error that led to it. Or, done, a hop that was confirmed and
// whose original came back (its ack lost with the connection): nothing
// to make again, the outcome to read.
type asideRetry struct {
	target  string
	outcome Outcome
	reason  Reason
	wait    time.Duration
	cause   error
	// at is 1 + the place in the chain of the carrier that made it (see
	// carrier), where it is made again; 0 when not known.
	at   int
	done bool
}

// redo makes the hop a again, for d, whose attempt is the one that
// decided it; for a hop done already, d takes its outcome, to be
// acknowledged.
func (a *asideRetry) redo(ctx context.Context, d *Delivery, rt Runtime) error {
	if a.done {
		rt.Logger().InfoContext(ctx, "acemq.message.kept", "message_id", d.MessageId, "attempt", d.Attempt(),
			"outcome", string(a.outcome), "why", "redelivered after its hop was confirmed: the ack was lost")
		d.outcome, d.cause, d.homeCopy = a.outcome, a.cause, a.outcome == OutcomeRequeue
		return nil
	}
	if a.outcome == OutcomeRetry {
		return toRung(ctx, d, rt, &Decision{Outcome: OutcomeRetry, Queue: a.target, Wait: a.wait, Cause: a.cause})
	}
	return setAside(ctx, d, rt, a.target, a.outcome, a.reason, a.cause)
}

// pendingFate is the hop d still has to make instead of another attempt,
// or nil: the consumer's memory of a copy it returned (d.aside), or a copy
// that names its hop itself (headerPendingHop; see refused). The latter is
// honoured only for a target of d's own queue (its .dlq, its .parked, one
// of its rungs, classic or durable, read by topology.ParseRung), so a
// header cannot send a message anywhere else; its attempt becomes the one
// that decided the hop (the copy carries the next, whatever the broker
// counted of its returns since), so the hop writes what it wrote the first
// time.
func (d *Delivery) pendingFate() *asideRetry {
	target, ok := d.Headers[headerPendingHop].(string)
	if d.aside != nil {
		// Remembered by the consumer; a copy that names its hop is still
		// that copy, and goes back as it is, never as a further copy.
		d.pending = d.pending || ok
		return d.aside
	}
	if !ok || d.queue == "" {
		return nil
	}
	a := &asideRetry{target: target}
	home, wait, _, rung := topology.ParseRung(target)
	switch {
	case target == topology.DeadLetterQueue(d.queue):
		a.outcome = OutcomeDeadLetter
	case target == topology.ParkedQueue(d.queue):
		a.outcome = OutcomePark
	case rung && home == d.queue:
		// Classic or durable, the rung's name says its wait.
		a.outcome, a.wait = OutcomeRetry, wait
	default:
		d.runtime().Logger().Warn("acemq.pending.hop.header.ignored", "message_id", d.MessageId, "header", headerPendingHop, "value", target)
		return nil
	}
	if a.outcome != OutcomeRetry {
		a.reason = ReasonExhausted
		if r, ok := d.Headers[HeaderReason].(string); ok && r != "" {
			a.reason = Reason(r)
		}
		if e, ok := d.Headers[HeaderError].(string); ok {
			a.cause = errors.New(e)
		}
	}
	d.pending = true
	d.attempt = max(1, AttemptOf(d.Headers)-1)
	return a
}

// standIn is the runtime of a delivery built with no Runtime: hops fail
// with ErrClosed, waits sleep, events go nowhere.
type standIn struct{}

func (standIn) Hop(context.Context, string, Outcome, Message) error { return ErrClosed }
func (standIn) Wait(ctx context.Context, _ *Delivery, w time.Duration) error {
	return waitFor(ctx, nil, w)
}
func (standIn) Event(context.Context, Event) {}
func (standIn) Logger() *slog.Logger         { return slog.Default() }
