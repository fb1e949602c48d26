package mq

import (
	"errors"
	"fmt"
	"runtime/debug"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Sentinel errors, for errors.Is. Broker refusals match by reply code: a
// *[BrokerError] with code 406 is ErrPreconditionFailed, and so on.
var (
	// ErrClosed: the broker, publisher or consumer was closed.
	ErrClosed = errors.New("mq: closed")
	// ErrPreconditionFailed: reply code 406, e.g. a queue redeclared with
	// different arguments.
	ErrPreconditionFailed = errors.New("mq: precondition failed")
	// ErrNotFound: reply code 404, e.g. a queue or exchange that does not
	// exist.
	ErrNotFound = errors.New("mq: not found")
	// ErrAccessRefused: reply code 403 ACCESS_REFUSED (permissions, a
	// queue another consumer holds exclusively) or 405 RESOURCE_LOCKED
	// (an exclusive queue of another connection): what this connection
	// may not use; [BrokerError].Code says which.
	ErrAccessRefused = errors.New("mq: access refused")
	// ErrUnroutable: a mandatory publish came back (basic.return): no queue
	// was bound for it. On the default exchange: the queue does not exist.
	ErrUnroutable = errors.New("mq: unroutable")
	// ErrNacked: the broker refused to take responsibility for a publish
	// (basic.nack).
	ErrNacked = errors.New("mq: nacked by broker")
	// ErrInvalid: a value the wire cannot carry, or that amqp091-go's
	// reader would refuse, was refused at the call, before anything was
	// sent (see [CheckPublish]; the error names the field and the limit): the connection and
	// every other publish are untouched.
	ErrInvalid = errors.New("mq: invalid input")
	// ErrRequeue marks a handler outcome that puts the message back on its
	// queue (basic.reject with requeue) after a pause; see [Requeue].
	ErrRequeue = errors.New("mq: requeue")
)

// AMQP reply codes this package names.
const (
	codeContentTooLarge    = 311
	codeNoRoute            = 312
	codeNoConsumers        = 313
	codeAccessRefused      = 403
	codeNotFound           = 404
	codeResourceLocked     = 405
	codePreconditionFailed = 406
)

// BrokerError is a refusal from the broker: which operation on which item,
// the reply code and the broker's reason.
type BrokerError struct {
	// Op is what was refused, e.g. `declare queue "orders"`.
	Op string
	// Code is the AMQP reply code (406 PRECONDITION_FAILED, …); 0 when the
	// failure did not come from the broker.
	Code int
	// Reason is the broker's reply text.
	Reason string
	// Err is the underlying error.
	Err error
}

func (e *BrokerError) Error() string {
	if e.Code == 0 {
		return fmt.Sprintf("mq: %s: %v", e.Op, e.Err)
	}
	return fmt.Sprintf("mq: %s: refused by the broker (%d): %s", e.Op, e.Code, e.Reason)
}

// Unwrap returns the underlying error.
func (e *BrokerError) Unwrap() error { return e.Err }

// Is matches the sentinel errors by reply code.
func (e *BrokerError) Is(target error) bool {
	switch target {
	case ErrPreconditionFailed:
		return e.Code == codePreconditionFailed
	case ErrNotFound:
		return e.Code == codeNotFound
	case ErrAccessRefused:
		return e.Code == codeAccessRefused || e.Code == codeResourceLocked
	}
	return false
}

// brokerError wraps err for op, lifting the reply code and reason of an
// *amqp.Error.
func brokerError(op string, err error) error {
	if err == nil {
		return nil
	}
	be := &BrokerError{Op: op, Err: err}
	var ae *amqp.Error
	if errors.As(err, &ae) && ae.Server {
		be.Code, be.Reason = ae.Code, ae.Reason
	}
	return be
}

// channelLevel reports whether an AMQP error is a channel exception (the
// channel dies, the connection lives): the refusal is final for the call
// that caused it, unlike a lost connection, which is worth retrying.
func channelLevel(err error) bool {
	var ae *amqp.Error
	if !errors.As(err, &ae) {
		return false
	}
	switch ae.Code {
	case codeContentTooLarge, codeNoRoute, codeNoConsumers, codeAccessRefused,
		codeNotFound, codeResourceLocked, codePreconditionFailed:
		return true
	}
	return false
}

// requeueError keeps what it unwraps to, so matching it (errors.Is on
// every failed hop, ErrorType on every span and metric) allocates nothing.
type requeueError struct {
	err  error
	both [2]error // ErrRequeue, err
}

func (e *requeueError) Error() string {
	if e.err == nil {
		return ErrRequeue.Error()
	}
	return "mq: requeue: " + e.err.Error()
}
func (e *requeueError) Unwrap() []error {
	if e.err == nil {
		return e.both[:1]
	}
	return e.both[:]
}

// Requeue marks err so the consumer runtime returns the message to its
// queue after a pause instead of rejecting it. The built-in middleware uses
// it when a hop cannot be made, so nothing is dropped. The return is a
// basic.reject with requeue: the message failed, and RabbitMQ counts it
// toward a quorum queue's delivery limit (4.3 and later count only such
// returns, not a basic.nack), so a loop of requeues ends there.
func Requeue(err error) error { return &requeueError{err: err, both: [2]error{ErrRequeue, err}} }

// PanicError is a panic recovered from a handler, as an error.
type PanicError struct {
	Value any
	Stack []byte
}

// newPanicError captures a recovered value and the current stack.
func newPanicError(v any) *PanicError { return &PanicError{Value: v, Stack: debug.Stack()} }

func (e *PanicError) Error() string { return fmt.Sprintf("panic: %v", e.Value) }

// Unwrap returns the panic value if it was an error.
func (e *PanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}
