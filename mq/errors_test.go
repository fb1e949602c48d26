package mq_test

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/mq"
)

func TestBrokerErrorIsByReplyCode(t *testing.T) {
	sentinels := map[int]error{
		403: mq.ErrAccessRefused,
		404: mq.ErrNotFound,
		405: mq.ErrResourceLocked,
		406: mq.ErrPreconditionFailed,
	}
	all := []error{mq.ErrAccessRefused, mq.ErrNotFound, mq.ErrResourceLocked, mq.ErrPreconditionFailed,
		mq.ErrUnroutable, mq.ErrNacked, mq.ErrClosed, mq.ErrNotStarted}
	for _, code := range []int{0, 200, 312, 403, 404, 405, 406, 501, 541} {
		be := &mq.BrokerError{Op: `declare queue "q"`, Code: code, Reason: "why", Err: &amqp.Error{Code: code, Reason: "why", Server: true}}
		for _, wrapped := range []error{be, fmt.Errorf("outer: %w", be), errors.Join(errors.New("other"), be)} {
			for _, target := range all {
				want := sentinels[code] == target
				if got := errors.Is(wrapped, target); got != want {
					t.Errorf("code %d: errors.Is(%v, %v) = %v; want %v", code, wrapped, target, got, want)
				}
			}
			if got := mq.ReplyCode(wrapped); got != code {
				t.Errorf("ReplyCode(%v) = %d; want %d", wrapped, got, code)
			}
		}
	}
}

func TestBrokerErrorMessage(t *testing.T) {
	be := &mq.BrokerError{Op: `declare queue "orders"`, Code: 406, Reason: "PRECONDITION_FAILED - inequivalent arg 'x-queue-type'",
		Err: &amqp.Error{Code: 406, Reason: "PRECONDITION_FAILED - inequivalent arg 'x-queue-type'", Server: true}}
	msg := be.Error()
	for _, want := range []string{`declare queue "orders"`, "406", "inequivalent arg"} {
		if !strings.Contains(msg, want) {
			t.Errorf("%q does not say %q", msg, want)
		}
	}
	var ae *amqp.Error
	if !errors.As(be, &ae) || ae.Code != 406 {
		t.Errorf("the amqp091-go error is not reachable with errors.As")
	}
	// Not from the broker: the underlying error speaks.
	local := &mq.BrokerError{Op: "open channel", Err: errors.New("channel id space exhausted")}
	if got := local.Error(); !strings.Contains(got, "open channel") || !strings.Contains(got, "exhausted") {
		t.Errorf("local failure reads %q", got)
	}
}

func TestReplyCode(t *testing.T) {
	tests := []struct {
		err  error
		want int
	}{
		{nil, 0},
		{errors.New("plain"), 0},
		{mq.ErrUnroutable, 0},
		{&amqp.Error{Code: 404, Reason: "NOT_FOUND"}, 404},
		{fmt.Errorf("wrapped: %w", &amqp.Error{Code: 320, Reason: "CONNECTION_FORCED"}), 320},
		// A BrokerError without a code defers to the error it wraps.
		{&mq.BrokerError{Op: "x", Err: &amqp.Error{Code: 501}}, 501},
		{&mq.BrokerError{Op: "x", Code: 406, Err: &amqp.Error{Code: 406}}, 406},
	}
	for _, tt := range tests {
		if got := mq.ReplyCode(tt.err); got != tt.want {
			t.Errorf("ReplyCode(%v) = %d; want %d", tt.err, got, tt.want)
		}
	}
}

func TestBatchError(t *testing.T) {
	be := &mq.BatchError{Errs: []error{nil, mq.ErrUnroutable, nil, fmt.Errorf("x: %w", mq.ErrNacked)}}
	if !errors.Is(be, mq.ErrUnroutable) || !errors.Is(be, mq.ErrNacked) || errors.Is(be, mq.ErrClosed) {
		t.Errorf("errors.Is over a batch is wrong")
	}
	if msg := be.Error(); !strings.Contains(msg, "2 of 4") || !strings.Contains(msg, "unroutable") {
		t.Errorf("batch error reads %q", msg)
	}
}

// Matching a requeue error costs nothing: errors.Is and errors.As walk
// its Unwrap on every delivery that fails a hop, and on every metric and
// span that names the error's kind.
func TestRequeueUnwrapsWithoutAllocating(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation counts")
	}
	err := mq.Requeue(errors.New("hop failed"))
	var pe *mq.PanicError
	if n := testing.AllocsPerRun(100, func() {
		if !errors.Is(err, mq.ErrRequeue) || errors.As(err, &pe) {
			t.Fatal("wrong match")
		}
	}); n != 0 {
		t.Errorf("%.0f allocations to match a requeue error, want 0", n)
	}
}

// ReplyCode finds the code in every shape an AMQP reply code comes in, and
// allocates nothing doing it (otelmq names every failed attempt's error
// with it).
func TestReplyCodeShapesWithoutAllocating(t *testing.T) {
	for _, c := range []struct {
		err  error
		want int
	}{
		{nil, 0},
		{io.EOF, 0},
		{&mq.BrokerError{Op: "declare queue", Code: 406}, 406},
		{fmt.Errorf("consume: %w", &mq.BrokerError{Code: 404}), 404},
		{&mq.BrokerError{Op: "consume", Err: &amqp.Error{Code: 404, Server: true}}, 404},
		{&mq.BrokerError{Op: "publish", Err: io.EOF}, 0},
		{&amqp.Error{Code: 320}, 320},
		{fmt.Errorf("a: %w", fmt.Errorf("b: %w", &amqp.Error{Code: 541})), 541},
		{errors.Join(io.EOF, &amqp.Error{Code: 504}), 504},
		{mq.Requeue(&mq.BrokerError{Code: 312}), 312},
		{mq.Requeue(nil), 0},
	} {
		if got := mq.ReplyCode(c.err); got != c.want {
			t.Errorf("ReplyCode(%v) = %d, want %d", c.err, got, c.want)
		}
		if testing.Short() {
			continue
		}
		if n := testing.AllocsPerRun(50, func() { _ = mq.ReplyCode(c.err) }); n != 0 {
			t.Errorf("ReplyCode(%v): %.0f allocations, want 0", c.err, n)
		}
	}
}

func TestRequeueError(t *testing.T) {
	cause := errors.New("cause")
	err := mq.Requeue(cause)
	if !errors.Is(err, mq.ErrRequeue) || !errors.Is(err, cause) {
		t.Errorf("Requeue(cause) = %v: must match ErrRequeue and cause", err)
	}
	if err := mq.Requeue(nil); !errors.Is(err, mq.ErrRequeue) || err.Error() != mq.ErrRequeue.Error() {
		t.Errorf("Requeue(nil) = %v", err)
	}
}

func TestPanicError(t *testing.T) {
	cause := errors.New("inner")
	pe := mq.NewPanicError(cause)
	if !errors.Is(pe, cause) || len(pe.Stack) == 0 || pe.Error() != "panic: inner" {
		t.Errorf("PanicError(err) = %v, unwraps %v, stack %d bytes", pe, errors.Unwrap(pe), len(pe.Stack))
	}
	if errors.Unwrap(mq.NewPanicError(42)) != nil {
		t.Error("a non-error panic value unwraps to nil")
	}
}

// A nil middleware in the list is skipped: the handler inside it must not
// be listed twice, or its Subscribe and Stop hooks would run twice.
