package mq

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// ErrNotReady: the broker is not ready to serve. A Broker not started
// yet says so at once, on every call that needs a connection (the error
// says to call Start); [Broker.Check] also reports with it a lost
// connection, blocked publishing, and a consumer not subscribed or ended
// with an error.
var ErrNotReady = errors.New("mq: not ready")

// errNotStarted is what a Broker used before Start returns.
var errNotStarted = fmt.Errorf("%w: the broker was not started (call Start first)", ErrNotReady)

// Check is the service's readiness: nil when the broker is connected, the
// broker does not block publishing (no memory or disk alarm), and every
// consumer of the broker is subscribed right now (not between a lost
// channel and its resubscribe); a consumer that ended with an error (it
// gave up: see [Consumer.Err]) keeps it failing until [Consumer.Stop].
// Otherwise it names every problem at once, each wrapping [ErrNotReady]
// ([ErrClosed] after Close; before Start, that it was not started). It
// does not block: it reads state, sends nothing to the broker.
func (b *Broker) Check(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b.mu.Lock()
	closed, started, st := b.closed, b.started, b.state
	consumers := make([]*Consumer, 0, len(b.consumers))
	for c := range b.consumers {
		consumers = append(consumers, c)
	}
	b.mu.Unlock()
	switch {
	case closed:
		return ErrClosed
	case !started:
		return errNotStarted
	}
	var errs []error
	if st == nil || st.isLost() {
		errs = append(errs, fmt.Errorf("%w: not connected to %s", ErrNotReady, b.urlList()))
	} else if reason, blocked := st.blockState(); blocked {
		errs = append(errs, fmt.Errorf("%w: the broker blocks publishing (%s)", ErrNotReady, reason))
	}
	var waiting, ended []string
	for _, c := range consumers {
		if c.ended() {
			if err := c.Err(); err != nil {
				ended = append(ended, fmt.Sprintf("consumer of %q: %v", c.queue, err))
			}
			continue
		}
		if !c.subscribed.Load() && !c.isStopping() {
			waiting = append(waiting, fmt.Sprintf("%q", c.queue))
		}
	}
	if len(waiting) > 0 {
		slices.Sort(waiting)
		errs = append(errs, fmt.Errorf("%w: not subscribed: consumer of %s", ErrNotReady, strings.Join(waiting, ", consumer of ")))
	}
	if len(ended) > 0 {
		slices.Sort(ended)
		errs = append(errs, fmt.Errorf("%w: ended with an error (stop it to clear this): %s", ErrNotReady, strings.Join(ended, "; ")))
	}
	return errors.Join(errs...)
}
