package mq

import (
	"errors"

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
// returns past the first two and what it remembers), its hops, events and log
// going where s says. Without s.Forward, Forward fails with ErrClosed.
func newSeamDelivery(queue string, raw amqp.Delivery, s seam.Delivery[Message, Event, HopKind]) *Delivery {
	raw.Acknowledger = nil
	restoreOrigin(&raw)
	return &Delivery{envelope: envelope(raw), queue: queue, attempt: AttemptOf(raw.Headers),
		forward: s.Forward, emit: s.Emit, log: s.Log, wait: s.Wait}
}

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
