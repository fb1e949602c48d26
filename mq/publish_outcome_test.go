package mq

// White-box tests of how a publish's outcome is decided: no broker needed.

import (
	"errors"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Every answer a channel can give maps to one outcome, for the pipelined
// channels and the solo resend alike.
func TestJudge(t *testing.T) {
	notFound := &amqp.Error{Code: 404, Reason: "NOT_FOUND - no exchange 'ex'", Server: true}
	forced := &amqp.Error{Code: 320, Reason: "CONNECTION_FORCED", Server: true}
	for _, c := range []struct {
		name string
		a    answer
		kind pubKind
		is   error // the outcome's error must match (nil: it must be nil)
	}{
		{"ack", answer{acked: true}, pubConfirmed, nil},
		{"ack after a return", answer{acked: true, returned: true}, pubReturned, ErrUnroutable},
		{"nack on a live channel", answer{}, pubNacked, ErrNacked},
		{"a return, then a nack", answer{returned: true}, pubNacked, ErrNacked},
		{"channel ended, reason unknown", answer{closed: true}, pubResend, nil},
		{"channel ended with the connection", answer{closed: true, end: forced}, pubResend, nil},
		{"channel exception, connection gone too", answer{closed: true, end: notFound, lost: true}, pubResend, nil},
		{"channel exception", answer{closed: true, end: notFound}, pubRefused, ErrNotFound},
		{"write refused by amqp091-go", answer{writeErr: amqp.ErrFieldType}, pubFailed, ErrInvalid},
		{"write refused on a dying channel", answer{writeErr: amqp.ErrFieldType, closed: true}, pubResend, nil},
		{"write refused on a lost connection", answer{writeErr: amqp.ErrFieldType, lost: true}, pubResend, nil},
		{"write failed on the socket", answer{writeErr: amqp.ErrClosed}, pubResend, nil},
	} {
		o := judge("ex", c.a)
		if o.kind != c.kind {
			t.Errorf("%s: %v; want %v", c.name, o.kind, c.kind)
		}
		switch {
		case c.is == nil && o.err != nil:
			t.Errorf("%s: error %v; want none", c.name, o.err)
		case c.is != nil && !errors.Is(o.err, c.is):
			t.Errorf("%s: error %v; want %v", c.name, o.err, c.is)
		}
	}
	var be *BrokerError
	if o := judge("ex", answer{closed: true, end: notFound}); !errors.As(o.err, &be) || be.Code != 404 {
		t.Errorf("a refusal is not a *BrokerError with the broker's code: %#v", o.err)
	}
}

// retireAfterNacks nacks in a row mark the channel for retirement; an ack
// in between starts the count again, and a channel's end counts for
// nothing.
func TestNackRun(t *testing.T) {
	pc := &pubChannel{}
	for _, k := range []pubKind{pubNacked, pubConfirmed, pubNacked, pubReturned, pubNacked, pubResend, pubRefused} {
		pc.count(k)
	}
	if pc.nacked.Load() {
		t.Fatal("nacks apart retired the channel")
	}
	pc.count(pubNacked)
	if !pc.nacked.Load() {
		t.Fatalf("%d nacks in a row did not retire the channel", retireAfterNacks)
	}
}
