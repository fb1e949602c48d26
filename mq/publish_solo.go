package mq

import (
	"context"
	"errors"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"
)

// maxSolos bounds how many publishes of one Publisher are resent alone at
// once (each on a channel of its own).
const maxSolos = 8

// solo sends a publish again alone, on a throwaway confirm-mode channel,
// after its channel was refused (shared, the refusal) with it in flight:
// its outcome there is its own, a refusal included. When ctx ends first,
// the error says the message's fate is unknown (it may have been taken
// before the refusal).
func (p *Publisher) solo(ctx context.Context, key string, cp checkedPublish, shared error) error {
	unknown := func(err error) error {
		return fmt.Errorf("the broker closed the channel (%v) with this publish in flight beside others, and sending it again alone did not finish: its fate is unknown: %w", shared, err)
	}
	select {
	case p.solos <- struct{}{}:
	case <-ctx.Done():
		return unknown(ctx.Err())
	}
	defer func() { <-p.solos }()
	for {
		o := p.soloOnce(ctx, key, cp)
		if o.kind == pubResend {
			continue
		}
		if o.kind == pubFailed && ctx.Err() != nil && errors.Is(o.err, ctx.Err()) {
			return unknown(o.err)
		}
		return o.err
	}
}

// soloOnce sends cp on a channel of its own and returns its outcome.
func (p *Publisher) soloOnce(ctx context.Context, key string, cp checkedPublish) pubOutcome {
	if err := ctx.Err(); err != nil {
		return failed(err)
	}
	ch, st, err := p.b.confirmChannel(ctx)
	if err != nil {
		return failed(err)
	}
	defer p.b.closeLater(ch)
	if err := cp.fitsFrame(st.frameMax()); err != nil {
		return failed(err)
	}
	returns := ch.NotifyReturn(make(chan amqp.Return, 1))
	closes := ch.NotifyClose(make(chan *amqp.Error, 1))
	if err := st.waitUnblocked(ctx); err != nil {
		return failed(err)
	}
	var dc *amqp.DeferredConfirmation
	err = p.b.bounded(ctx, func() (err error) {
		dc, err = ch.PublishWithDeferredConfirm(p.exchange, key, p.mandatory, false, cp.pub)
		return err
	}, nil)
	if err != nil {
		if ctx.Err() != nil {
			return failed(err)
		}
		// The same message went out on the pipelined channel, so this is
		// the channel or the connection ending: judge says resend.
		return judge(p.exchange, answer{writeErr: err, closed: ch.IsClosed(), lost: st.isLost()})
	}
	select {
	case <-dc.Done():
	case <-ctx.Done():
		return failed(st.blockedErr(fmt.Errorf("no confirm yet: %w", ctx.Err())))
	}
	a := answer{acked: dc.Acked()}
	switch {
	case a.acked:
		select {
		case <-returns:
			a.returned = true
		default:
		}
	case ch.IsClosed():
		a.closed = true
		select {
		case a.end = <-closes:
		case <-ctx.Done():
			return failed(fmt.Errorf("no confirm yet: %w", ctx.Err()))
		}
		a.lost = st.isLost()
	}
	return judge(p.exchange, a)
}
