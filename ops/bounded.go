package ops

import (
	"context"

	amqp "github.com/rabbitmq/amqp091-go"
)

// call runs fn, which makes amqp091 calls on ch that take no context, so
// that ctx bounds the wait: on a network gone quiet those calls (and
// Channel.Close with them) return only when the heartbeat gives the
// connection up, three intervals later. When ctx ends first, call returns
// ctx's error, and the caller closes ch as it always does (closeChannel,
// which does not wait past ctx either); fn returns on its own goroutine
// once the broker answers or the connection dies (the heartbeat, or
// Broker.Close, which cuts a connection that does not answer). So every
// ops call returns by its context, and what is left behind ends with the
// connection at the latest.
func call(ctx context.Context, fn func() error) error {
	if ctx.Done() == nil {
		return fn()
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- fn() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// closeChannel closes ch, waiting for the broker's close-ok while ctx
// lasts; past that the close goes on on a goroutine of its own, which ends
// when the broker answers or the connection dies.
func closeChannel(ctx context.Context, ch *amqp.Channel) {
	waitOrLeave(ctx, func() { _ = ch.Close() })
}

// waitOrLeave runs fn on a goroutine and waits for it while ctx lasts
// (fn must end by itself: a close that ends with the connection at the
// latest).
func waitOrLeave(ctx context.Context, fn func()) {
	if ctx.Err() != nil {
		go fn()
		return
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
}
