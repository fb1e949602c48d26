package mq

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// ErrNotReady: [Broker.Check] found the broker not ready to serve (no
// connection, publishing blocked, a consumer not subscribed).
var ErrNotReady = errors.New("mq: not ready")

// Check is the service's readiness: nil when the broker is connected, the
// broker does not block publishing (no memory or disk alarm), and every
// consumer of the broker is subscribed right now (not between a lost
// channel and its resubscribe). Otherwise it names every problem at once,
// each wrapping [ErrNotReady] ([ErrClosed] after Close, [ErrNotStarted] before
// Start). It does not block: it reads state, sends nothing to the broker.
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
		return ErrNotStarted
	}
	var errs []error
	if st == nil || st.isLost() {
		errs = append(errs, fmt.Errorf("%w: not connected to %s", ErrNotReady, b.urlList()))
	} else if reason, blocked := st.blockState(); blocked {
		errs = append(errs, fmt.Errorf("%w: the broker blocks publishing (%s)", ErrNotReady, reason))
	}
	var waiting []string
	for _, c := range consumers {
		if !c.subscribed.Load() && !c.isStopping() {
			waiting = append(waiting, fmt.Sprintf("%q", c.queue))
		}
	}
	if len(waiting) > 0 {
		slices.Sort(waiting)
		errs = append(errs, fmt.Errorf("%w: not subscribed: consumer of %s", ErrNotReady, strings.Join(waiting, ", consumer of ")))
	}
	return errors.Join(errs...)
}
