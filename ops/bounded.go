package ops

import (
	"context"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// settleGrace is how long past its context an ops call still waits for
// the broker to answer what was already asked (a basic.get in flight, the
// close that gives back what it held): on a broker that answers, that is
// milliseconds, and it keeps a cancelled call from returning while the
// messages it held are still on their way back; on a network gone quiet
// it is all the call waits.
const settleGrace = 250 * time.Millisecond

// call runs fn, which makes amqp091 calls that take no context, so that
// ctx bounds the wait: on a network gone quiet those calls (and
// Channel.Close with them) return only when the heartbeat gives the
// connection up, three intervals later. When ctx ends first, call waits
// settleGrace more for fn's answer, then returns ctx's error; the caller
// closes its channel as it always does (closeChannel, bounded the same
// way), and fn returns on its own goroutine once the broker answers or the
// connection dies (the heartbeat, or Broker.Close, which cuts a connection
// that does not answer). So every ops call returns by its context (and
// settleGrace), and what is left behind ends with the connection at the
// latest.
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
	}
	t := time.NewTimer(settleGrace)
	defer t.Stop()
	select {
	case err := <-done:
		return err // answered as ctx ended: the caller sees what it got
	case <-t.C:
		return ctx.Err()
	}
}

// closeChannel closes ch, waiting for the broker's close-ok while ctx
// lasts and settleGrace past it; after that the close goes on on a
// goroutine of its own, which ends when the broker answers or the
// connection dies.
func closeChannel(ctx context.Context, ch *amqp.Channel) {
	waitOrLeave(ctx, func() { _ = ch.Close() })
}

// waitOrLeave runs fn on a goroutine and waits for it while ctx lasts and
// settleGrace past it (fn must end by itself: a close that ends with the
// connection at the latest).
func waitOrLeave(ctx context.Context, fn func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	select {
	case <-done:
		return
	case <-ctx.Done():
	}
	t := time.NewTimer(settleGrace)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}
