package middleware

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/acemq/acemq-go/mq"
)

// ErrTimeout is matched by the error of an attempt that ran out of time.
var ErrTimeout = errors.New("middleware: attempt timed out")

// Timeout gives every attempt its own deadline of d: the attempt's context
// ends after d, and an attempt that fails after its deadline fails with
// ErrTimeout (which also matches context.DeadlineExceeded), to be retried
// like any failure. A handler that returns nil after its deadline still
// succeeded: its work is done, and the message is acknowledged.
//
// Go cannot stop a goroutine from outside: a handler that ignores its
// context keeps its consumer slot until it returns. d <= 0 means no timeout.
func Timeout(d time.Duration) mq.Middleware {
	return func(next mq.Handler) mq.Handler {
		if d <= 0 {
			return next
		}
		return &timeout{next: next, d: d}
	}
}

type timeout struct {
	next mq.Handler
	d    time.Duration
}

func (t *timeout) Handle(ctx context.Context, dl *mq.Delivery) error {
	actx, cancel := context.WithTimeout(ctx, t.d)
	defer cancel()
	err := t.next.Handle(actx, dl)
	if err != nil && ctx.Err() == nil && errors.Is(actx.Err(), context.DeadlineExceeded) {
		return &timeoutError{d: t.d, err: err}
	}
	return err
}

type timeoutError struct {
	d   time.Duration
	err error
}

func (e *timeoutError) Error() string {
	return fmt.Sprintf("attempt timed out after %v: %v", e.d, e.err)
}

func (e *timeoutError) Unwrap() []error { return []error{ErrTimeout, context.DeadlineExceeded, e.err} }
