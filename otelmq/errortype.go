package otelmq

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/acemq/acemq-go/mq"
)

// ErrorType is the error.type this package reports for err: a stable,
// low-cardinality name, never a Go type name, so dashboards and alerts
// survive refactoring. In the order they are tried:
//
//	panic                 a panic recovered from a handler (*mq.PanicError)
//	timeout               context.DeadlineExceeded (Timeout middleware included)
//	canceled              context.Canceled
//	unroutable            mq.ErrUnroutable: a mandatory publish came back
//	nacked                mq.ErrNacked: the broker refused a publish
//	closed                mq.ErrClosed
//	<reply code name>     an AMQP reply code (a *mq.BrokerError or *amqp.Error) in the chain:
//	                      content-too-large (311), no-route (312),
//	                      no-consumers (313), connection-forced (320),
//	                      invalid-path (402), access-refused (403),
//	                      not-found (404), resource-locked (405),
//	                      precondition-failed (406), frame-error (501),
//	                      syntax-error (502), command-invalid (503),
//	                      channel-error (504), unexpected-frame (505),
//	                      resource-error (506), not-allowed (530),
//	                      not-implemented (540), internal-error (541)
//	requeue               mq.ErrRequeue with nothing more specific inside
//	_OTHER                anything else
//
// A nil error has no type: ErrorType returns "".
func ErrorType(err error) string {
	if err == nil {
		return ""
	}
	switch {
	case isType[*mq.PanicError](err):
		return "panic"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, mq.ErrUnroutable):
		return "unroutable"
	case errors.Is(err, mq.ErrNacked):
		return "nacked"
	case errors.Is(err, mq.ErrClosed):
		return "closed"
	}
	if name := replyCodeName(replyCode(err)); name != "" {
		return name
	}
	if errors.Is(err, mq.ErrRequeue) {
		return "requeue"
	}
	return semconv.ErrorTypeOther.Value.AsString()
}

// isType reports whether err's tree holds an E, as errors.As would,
// without the allocation errors.As makes for its target.
func isType[E error](err error) bool {
	_, ok := errors.AsType[E](err)
	return ok
}

// replyCodeName names an AMQP 0-9-1 reply code as the specification does,
// lower case with hyphens.
func replyCodeName(code int) string {
	switch code {
	case 311:
		return "content-too-large"
	case 312:
		return "no-route"
	case 313:
		return "no-consumers"
	case 320:
		return "connection-forced"
	case 402:
		return "invalid-path"
	case 403:
		return "access-refused"
	case 404:
		return "not-found"
	case 405:
		return "resource-locked"
	case 406:
		return "precondition-failed"
	case 501:
		return "frame-error"
	case 502:
		return "syntax-error"
	case 503:
		return "command-invalid"
	case 504:
		return "channel-error"
	case 505:
		return "unexpected-frame"
	case 506:
		return "resource-error"
	case 530:
		return "not-allowed"
	case 540:
		return "not-implemented"
	case 541:
		return "internal-error"
	}
	return ""
}

// fail marks span as failed with err: status Error with the error's text
// (capped) and the attribute error.type, which it returns.
func fail(span trace.Span, err error) string {
	et := ErrorType(err)
	if span.IsRecording() {
		span.SetStatus(codes.Error, mq.ErrorText(err))
		span.SetAttributes(semconv.ErrorTypeKey.String(et))
	}
	return et
}
