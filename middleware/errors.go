package middleware

import "errors"

type parkError struct{ err error }

func (e *parkError) Error() string { return "park: " + errText(e.err) }
func (e *parkError) Unwrap() error { return e.err }

type rejectError struct{ err error }

func (e *rejectError) Error() string { return "reject: " + errText(e.err) }
func (e *rejectError) Unwrap() error { return e.err }

func errText(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// Park marks err as needing a person: Parking sends the message to
// <queue>.parked with the failure headers, without retrying. A nil err is
// still a park (with no error text).
func Park(err error) error { return &parkError{err} }

// Reject marks err as permanent: the message goes straight to
// <queue>.dlq (reason "rejected"), without retrying.
func Reject(err error) error { return &rejectError{err} }

// IsPark reports whether err, or an error it wraps, was marked with Park.
func IsPark(err error) bool {
	_, ok := errors.AsType[*parkError](err)
	return ok
}

// IsReject reports whether err, or an error it wraps, was marked with
// Reject.
func IsReject(err error) bool {
	_, ok := errors.AsType[*rejectError](err)
	return ok
}
