package mq

import (
	"context"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"
)

// pubKind is what became of one publish.
type pubKind uint8

const (
	pubConfirmed pubKind = iota // acked, and routed to at least one queue (or not mandatory)
	pubReturned                 // acked after a basic.return: no queue took it (ErrUnroutable)
	pubNacked                   // nacked on a channel that lives on (ErrNacked)
	pubResend                   // its channel or connection ended before its answer: write it again
	pubRefused                  // a channel exception ended its channel with it in flight (a BrokerError)
	pubFailed                   // it ended otherwise, err says how: ctx ended, ErrInvalid, ErrClosed, ...
)

var pubKindNames = [...]string{"confirmed", "returned", "nacked", "resend", "refused", "failed"}

func (k pubKind) String() string {
	if int(k) < len(pubKindNames) {
		return pubKindNames[k]
	}
	return fmt.Sprintf("pubKind(%d)", k)
}

// pubOutcome is what became of one publish: decided by judge from what the
// channel said (or by the waiting caller, pubFailed, when its ctx ended
// first), and read by Publisher.conclude for Publish and PublishBatch, and
// by Publisher.solo for the resend alone.
type pubOutcome struct {
	kind pubKind
	// err is the error the publish ends with: nil when confirmed,
	// ErrUnroutable, ErrNacked, the refusal, or why it failed; nil for a
	// resend. The Publisher adds the destination (Publisher.wrap).
	err error
}

// failed is the outcome of a publish that ended with err.
func failed(err error) pubOutcome { return pubOutcome{kind: pubFailed, err: err} }

// answer is what a publish's channel said about it, as judge reads it.
type answer struct {
	writeErr error       // the write failed (then only closed and lost are set)
	acked    bool        // its confirm was an ack
	returned bool        // a basic.return came for it before its ack
	closed   bool        // its channel had ended when the answer was read
	end      *amqp.Error // why the channel ended, once the watcher saw it
	lost     bool        // the connection had ended too
}

// judge decides a publish's outcome from its channel's answer; it is the
// one place that does, for the pipelined channels and the solo resend
// alike. A nack on a closed channel says nothing about the message:
// amqp091-go marks everything pending as not acked when a channel ends.
// A channel exception (the exchange does not exist) is a refusal, which may
// be this publish's or another's in flight beside it; a lost connection or
// a channel closed otherwise means send again.
func judge(exchange string, a answer) pubOutcome {
	switch {
	case a.writeErr != nil:
		if !a.closed && !a.lost && isCallerError(a.writeErr) {
			// amqp091-go refused to write it; the connection is intact.
			return failed(fmt.Errorf("%w: %w", ErrInvalid, a.writeErr))
		}
		// The channel died under it, or its connection did (a write error
		// comes before the reader notices the loss).
		return pubOutcome{kind: pubResend}
	case a.acked && a.returned:
		return pubOutcome{kind: pubReturned, err: ErrUnroutable}
	case a.acked:
		return pubOutcome{kind: pubConfirmed}
	case !a.closed:
		return pubOutcome{kind: pubNacked, err: ErrNacked}
	case a.end == nil || !channelLevel(a.end) || a.lost:
		return pubOutcome{kind: pubResend}
	}
	return pubOutcome{kind: pubRefused, err: brokerError(publishOp(exchange), a.end)}
}

// flight is one publish written to a pipelined channel, its answer not
// yet read.
type flight struct {
	pc        *pubChannel
	dc        *amqp.DeferredConfirmation
	seq       uint64 // mandatory publishes: its place in pc's return queue
	mandatory bool
}

// await waits for f's confirm, or ctx, and returns the outcome.
func (f flight) await(ctx context.Context) pubOutcome {
	defer f.pc.landed()
	if isDone(f.dc) { // answered already: that wins over an ended ctx
		return f.outcome(ctx)
	}
	select {
	case <-f.dc.Done():
		return f.outcome(ctx)
	case <-ctx.Done():
		if f.mandatory {
			f.pc.abandon(f.seq)
		}
		return failed(f.pc.st.blockedErr(fmt.Errorf("no confirm yet: %w", ctx.Err())))
	}
}

// outcome reads the answer of a flight whose deferred confirmation is
// done, and judges it. amqp091-go answers deferred confirmations exactly
// by delivery tag (unlike the Confirmation values NotifyPublish hands
// over, where a nack that comes ahead of an ack with multiple set is
// reported as an ack), and it hands a basic.return to every return
// listener before it reads the basic.ack that follows: the watcher has
// recorded the return by then. A channel that ended is waited for, so
// that its close reason is known.
func (f flight) outcome(ctx context.Context) pubOutcome {
	returned := f.mandatory && f.pc.wasReturned(f.seq)
	a := answer{acked: f.dc.Acked(), returned: returned}
	if !a.acked && f.pc.ch.IsClosed() {
		if !f.pc.waitDone(ctx) {
			return failed(fmt.Errorf("no confirm yet: %w", ctx.Err()))
		}
		a = f.pc.endAnswer()
	}
	o := judge(f.pc.exchange, a)
	f.pc.count(o.kind)
	return o
}
