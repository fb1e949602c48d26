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
// after its channel was refused with it in flight: its outcome there is
// its own. When ctx ends first, the error says the message's fate is
// unknown (it may have been taken before the refusal).
func (p *Publisher) solo(ctx context.Context, key string, cp checkedPublish, shared *sharedRefusal) error {
	unknown := func(err error) error {
		return fmt.Errorf("the broker closed the channel (%v) with this publish in flight beside others, and sending it again alone did not finish: its fate is unknown: %w", shared.err, err)
	}
	select {
	case p.solos <- struct{}{}:
	case <-ctx.Done():
		return unknown(ctx.Err())
	}
	defer func() { <-p.solos }()
	for {
		err := p.soloOnce(ctx, key, cp)
		if err != errResend {
			if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
				return unknown(err)
			}
			return err
		}
	}
}

func (p *Publisher) soloOnce(ctx context.Context, key string, cp checkedPublish) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	ch, st, err := p.b.confirmChannel(ctx)
	if err != nil {
		return err
	}
	defer p.b.closeLater(ch)
	if err := cp.fitsFrame(st.frameMax()); err != nil {
		return err
	}
	returns := ch.NotifyReturn(make(chan amqp.Return, 1))
	closes := ch.NotifyClose(make(chan *amqp.Error, 1))
	if err := st.waitUnblocked(ctx); err != nil {
		return err
	}
	var dc *amqp.DeferredConfirmation
	err = p.b.bounded(ctx, func() (err error) {
		dc, err = ch.PublishWithDeferredConfirm(p.exchange, key, p.mandatory, false, cp.pub)
		return err
	}, nil)
	if err != nil {
		if ctx.Err() != nil {
			return err
		}
		return errResend
	}
	select {
	case <-dc.Done():
	case <-ctx.Done():
		return st.blockedErr(fmt.Errorf("no confirm yet: %w", ctx.Err()))
	}
	if dc.Acked() {
		select {
		case <-returns:
			return ErrUnroutable
		default:
			return nil
		}
	}
	if !ch.IsClosed() {
		return ErrNacked
	}
	var e *amqp.Error
	select {
	case e = <-closes:
	case <-ctx.Done():
		return fmt.Errorf("no confirm yet: %w", ctx.Err())
	}
	if e == nil || !channelLevel(e) || st.isLost() {
		return errResend
	}
	return brokerError(publishOp(p.exchange), e)
}
