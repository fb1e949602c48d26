package mq

import (
	"context"
	"fmt"
	"log/slog"
	"slices"

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
// The Handler a middleware returns may also implement Subscriber, and a
// Stop(ctx context.Context) error method (called when its consumer stops,
// after the last delivery is settled), to take part in its consumer's
// lifecycle.
//
// What a consumer's middleware sees, the rule metrics and audit trails can
// be built on: every delivery the consumer takes up passes the app's
// outermost middleware once. When next returns, d.Outcome() is set, never
// empty, and is what the consumer carries out for the error next returned:
// the outcome Logging writes, DeliveryHook.OnDeliveryDone reads and the
// events report (ack, retry, dead-letter, park, requeue or reject). Then
// d.Attempt() is the last attempt that ran for the delivery, the one the
// outcome follows (after in-process retries, the last of them), and a
// delivery no attempt ran on (an inbox's duplicate, a set-aside made
// again) reads the attempt it came with.
//
// In detail: a middleware outside the one that decides an in-process retry
// (the retry ladder) is called once per delivery, one inside it once per
// attempt; a redelivery whose set-aside is made again, its attempts used,
// passes every middleware outside the one that decided the set-aside, and
// the handler is not called; so does a redelivery of a message whose hop
// was confirmed but whose ack the broker never took (the connection was
// lost first): it reads the outcome carried out and is acknowledged (in
// this process; another one handles it again, at least once). A
// middleware that returns something other than next returned changes the
// outcome from there out, but a fate carried out (a confirmed hop: a
// rung, a carry, .dlq, .parked) stands: an error or a panic after it is
// logged and the original acknowledged.
// Deliveries a stopping consumer gives back unstarted pass no middleware.
type Middleware func(Handler) Handler

// Chain wraps h in mws, the first outermost: Chain(h, a, b) is a(b(h)).
func Chain(h Handler, mws ...Middleware) Handler {
	for i := len(mws) - 1; i >= 0; i-- {
		if mws[i] != nil {
			h = mws[i](h)
		}
	}
	return h
}

// chainCarried is a consumer's chain: h in mws as Chain wraps it, with a
// carrier just outside each middleware, which carries out that
// middleware's decision at its boundary (see carrier), so the middleware
// outside it sees what it saw before decisions existed: nil and
// d.Outcome() after a hop, the final result after in-process retries. It
// also returns every handler a middleware built and the carrier around
// each, outermost first. A nil middleware is skipped (listing the handler
// inside it in its place would run that handler's Subscribe and Stop
// hooks twice).
func chainCarried(h Handler, mws []Middleware) (Handler, []Handler, []*carrier) {
	built := make([]Handler, 0, len(mws))
	carriers := make([]*carrier, 0, len(mws))
	for i := len(mws) - 1; i >= 0; i-- {
		if mws[i] == nil {
			continue
		}
		b := mws[i](h)
		c := &carrier{next: b}
		built, carriers, h = append(built, b), append(carriers, c), c
	}
	slices.Reverse(built)
	slices.Reverse(carriers)
	return h, built, carriers
}

// Subscriber is implemented by a Handler (as a middleware returns it) that
// has work to do before its consumer subscribes: on the first subscribe and
// again on every resubscribe after a reconnect. Declaring the queues a
// middleware publishes to belongs here. An error stops the subscribe: the
// first one fails Consume, later ones are retried with backoff.
type Subscriber interface {
	Subscribe(ctx context.Context, s *Subscription) error
}

// stopper is implemented by a Handler that has work to do when its consumer
// stops, after the last delivery is settled.
type stopper interface {
	Stop(ctx context.Context) error
}

// policyRunner is implemented by a Handler that runs a retry policy (the
// retry ladder). Runner.RetryPolicy reads it, so the queues declared
// for a consumer derive from the policy it runs, never from a second list.
type policyRunner interface {
	RetryPolicy() retry.Policy
}

// policyTaker is implemented by a Handler that runs the retry policy its
// Broker declared for the consumed queue (topology.Retry), as
// middleware.StandardDeclared's ladder does, so that the policy is written
// once. Broker.Consume gives it that policy before the consumer
// subscribes, and refuses the consumer (ErrInvalid) when the Broker
// declared the queue with no policy; NewRunner, which has no Broker,
// refuses it always.
type policyTaker interface {
	policyRunner
	TakePolicy(p retry.Policy)
}

// takePolicies gives every policyTaker among hs the policy declared for
// queue (ok: one is declared); without one, a taker is an error.
func takePolicies(hs []Handler, queue string, declared retry.Policy, ok bool) error {
	for _, h := range hs {
		t, is := h.(policyTaker)
		if !is {
			continue
		}
		if !ok {
			return fmt.Errorf("%w: the consumer of %q takes the retry policy its Broker declared for the queue, and the Broker declared %q with no topology.Retry: declare it with one (Broker.Declare) before Consume, or give the policy (middleware.Standard(policy))", ErrInvalid, queue, queue)
		}
		t.TakePolicy(declared)
	}
	return nil
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
	// Runner is the consumer's chain; [Runner.RetryPolicy] is the policy
	// it runs, the one the queues declared for the consumer derive from.
	Runner *Runner
}

// policyHolder is the first of hs that runs a retry policy, or nil: the
// one whose policy the consumer's queues are declared for.
func policyHolder(hs []Handler) policyRunner {
	for _, h := range hs {
		if ph, ok := h.(policyRunner); ok {
			return ph
		}
	}
	return nil
}
