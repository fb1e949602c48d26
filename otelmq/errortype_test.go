package otelmq_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/otelmq"
)

func TestErrorType(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("handler: %w", err) }
	for _, c := range []struct {
		err  error
		want string
	}{
		{nil, ""},
		{&mq.PanicError{Value: "oops"}, "panic"},
		{wrap(&mq.PanicError{Value: context.DeadlineExceeded}), "panic"},
		{wrap(context.DeadlineExceeded), "timeout"},
		{context.Canceled, "canceled"},
		{wrap(mq.ErrUnroutable), "unroutable"},
		{mq.ErrNacked, "nacked"},
		{mq.ErrClosed, "closed"},
		{&mq.BrokerError{Op: "declare queue", Code: 406}, "precondition-failed"},
		{wrap(&mq.BrokerError{Op: "consume", Code: 404}), "not-found"},
		{&mq.BrokerError{Code: 403}, "access-refused"},
		{&mq.BrokerError{Code: 405}, "resource-locked"},
		{wrap(&amqp.Error{Code: 320, Reason: "CONNECTION_FORCED"}), "connection-forced"},
		{&amqp.Error{Code: 541}, "internal-error"},
		{&amqp.Error{Code: 999}, "_OTHER"},
		{&mq.BrokerError{Op: "consume", Err: &amqp.Error{Code: 404}}, "not-found"},
		{mq.Requeue(nil), "requeue"},
		{mq.Requeue(mq.ErrUnroutable), "unroutable"},
		{errors.New("anything"), "_OTHER"},
	} {
		if got := otelmq.ErrorType(c.err); got != c.want {
			t.Errorf("ErrorType(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}

// ErrorType runs on every failed attempt and every failed delivery: it
// finds the error's kind without allocating, whatever the kind is.
func TestErrorTypeAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own")
	}
	for _, err := range []error{
		errors.New("anything"),
		fmt.Errorf("handler: %w", &mq.BrokerError{Code: 406}),
		&amqp.Error{Code: 320},
		&mq.PanicError{Value: "oops"},
		context.DeadlineExceeded,
		// mq.Requeue's is held to it in package mq
		// (TestRequeueUnwrapsWithoutAllocating).
	} {
		if n := testing.AllocsPerRun(100, func() { _ = otelmq.ErrorType(err) }); n != 0 {
			t.Errorf("ErrorType(%v): %v allocations, want 0", err, n)
		}
	}
}
