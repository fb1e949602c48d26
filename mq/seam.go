package mq

import (
	"context"
	"errors"
	"log/slog"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/internal/seam"
)

// What package mqtest and fxmodule need from mq without mq exporting it:
// they fetch these from internal/seam by type.
func init() {
	seam.Set(newSeamDelivery)
	seam.Set(seamAttempts)
	seam.Set(seamChain)
}

// newSeamDelivery builds a Delivery outside any consumer, its attempt read
// from raw's x-acemq-attempt (a consumer also counts a quorum queue's
// returns past the first two and what it remembers), delivered by a
// stand-in that sends its hops, events, log and waits where s says.
// Without s.Forward, Forward fails with ErrClosed.
func newSeamDelivery(queue string, raw amqp.Delivery, s seam.Delivery[Message, Event, HopKind]) *Delivery {
	raw.Acknowledger = nil
	restoreOrigin(&raw)
	return &Delivery{envelope: envelope(raw), queue: queue, attempt: AttemptOf(raw.Headers), from: standIn{s}}
}

// standIn is the deliverer of a delivery built outside any consumer: no
// connection, no channel, nothing that drains or cuts it short.
type standIn struct {
	s seam.Delivery[Message, Event, HopKind]
}

func (t standIn) hop(ctx context.Context, queue string, kind HopKind, m Message) error {
	if t.s.Forward == nil {
		return ErrClosed
	}
	return t.s.Forward(ctx, queue, kind, m)
}

func (t standIn) event(ctx context.Context, e Event) {
	if t.s.Emit != nil {
		t.s.Emit(ctx, e)
	}
}

func (t standIn) logger() *slog.Logger {
	if t.s.Log != nil {
		return t.s.Log
	}
	return slog.Default()
}

// wait sleeps w, on the test's clock if it has one.
func (t standIn) wait(ctx context.Context, _ *Delivery, w time.Duration) error {
	if t.s.Wait != nil {
		return t.s.Wait(ctx, w)
	}
	return waitFor(ctx, nil, w)
}

func (standIn) drains() <-chan struct{} { return nil }
func (standIn) server() string          { return "" }
func (standIn) login() string           { return "" }
func (standIn) cutShort() bool          { return false }

// seamAttempts wraps h as a consumer wraps the application's handler:
// every call after the first is the next attempt, and hooks see each one.
func seamAttempts(h Handler, hooks []AttemptHook) Handler {
	return &attemptHandler{next: h, hooks: hooks}
}

// seamChain builds the chain Broker.Consume builds from opts around h (the
// attempt counter with hooks innermost), and returns the handler whose
// retry policy the chain runs, as Subscription.RetryPolicy finds it (nil
// when none runs one). An invalid option is an error, as Consume's.
func seamChain(h Handler, hooks []AttemptHook, opts []ConsumerOption) (Handler, PolicyHolder, error) {
	var cfg consumerConfig
	for _, o := range opts {
		if o != nil {
			o.applyConsumer(&cfg)
		}
	}
	if err := errors.Join(cfg.errs...); err != nil {
		return nil, nil, err
	}
	outer, built := chain(&attemptHandler{next: h, hooks: hooks}, cfg.mws)
	return outer, policyHolder(built), nil
}
