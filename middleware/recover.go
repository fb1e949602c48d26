package middleware

import (
	"context"
	"fmt"
	"runtime/debug"

	"github.com/acemq/acemq-go/mq"
)

// Recover turns a panic in the handler into an error (*mq.PanicError), so
// the retry ladder retries it like any other failure and the process lives.
// The panic and its stack are logged once, here, as acemq.handler.panic.
func Recover() mq.Middleware {
	return func(next mq.Handler) mq.Handler { return &recoverer{next} }
}

type recoverer struct{ next mq.Handler }

func (r *recoverer) Handle(ctx context.Context, d *mq.Delivery) (err error) {
	defer func() {
		if v := recover(); v != nil {
			pe := &mq.PanicError{Value: v, Stack: debug.Stack()}
			d.Logger().ErrorContext(ctx, "acemq.handler.panic", "message_id", d.MessageId,
				"attempt", d.Attempt(), "panic", fmt.Sprint(v), "stack", string(pe.Stack))
			err = pe
		}
	}()
	return r.next.Handle(ctx, d)
}
