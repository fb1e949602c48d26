package mq_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/mq"
)

func TestBrokerErrorIsByReplyCode(t *testing.T) {
	// 405 RESOURCE_LOCKED is what RabbitMQ answers for another
	// connection's exclusive queue: access refused, as 403 is.
	sentinels := map[int]error{
		403: mq.ErrAccessRefused,
		404: mq.ErrNotFound,
		405: mq.ErrAccessRefused,
		406: mq.ErrPreconditionFailed,
	}
	all := []error{mq.ErrAccessRefused, mq.ErrNotFound, mq.ErrPreconditionFailed,
		mq.ErrUnroutable, mq.ErrNacked, mq.ErrClosed, mq.ErrNotReady}
	for _, code := range []int{0, 200, 312, 403, 404, 405, 406, 501, 541} {
		be := &mq.BrokerError{Op: `declare queue "q"`, Code: code, Reason: "why", Err: &amqp.Error{Code: code, Reason: "why", Server: true}}
		for _, wrapped := range []error{be, fmt.Errorf("outer: %w", be), errors.Join(errors.New("other"), be)} {
			for _, target := range all {
				want := sentinels[code] == target
				if got := errors.Is(wrapped, target); got != want {
					t.Errorf("code %d: errors.Is(%v, %v) = %v; want %v", code, wrapped, target, got, want)
				}
			}
			if got, ok := errors.AsType[*mq.BrokerError](wrapped); !ok || got.Code != code {
				t.Errorf("errors.AsType[*mq.BrokerError](%v) has no code %d", wrapped, code)
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
