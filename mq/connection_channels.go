package mq

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Channel hands out a new channel on the live connection (waiting for one,
// bounded by ctx). The caller owns it: it is nobody else's, it does not
// survive a reconnect, and the caller must close it. Publishers, consumers,
// declarations and inspection all get their own this way.
func (b *Broker) Channel(ctx context.Context) (*amqp.Channel, error) {
	ch, _, err := b.channel(ctx)
	return ch, err
}

func (b *Broker) channel(ctx context.Context) (*amqp.Channel, *conn, error) {
	for {
		st, err := b.current(ctx)
		if err != nil {
			return nil, nil, err
		}
		var ch *amqp.Channel
		err = b.bounded(ctx, func() (err error) {
			ch, err = st.c.Channel()
			return err
		}, func() {
			if ch != nil {
				_ = ch.Close()
			}
		})
		if err == nil {
			return ch, st, nil
		}
		if ctx.Err() != nil {
			// A blocked connection stops answering channel.open too.
			return nil, nil, st.blockedErr(fmt.Errorf("mq: open channel: %w", err))
		}
		if !st.isLost() && !errors.Is(err, amqp.ErrClosed) && !isNetError(err) {
			return nil, nil, brokerError("open channel", err)
		}
		// The connection went as we asked (a write that failed on the
		// socket means it is going, even before the supervisor has seen
		// it); wait for the next one.
		select {
		case <-st.lost:
		case <-ctx.Done():
			return nil, nil, fmt.Errorf("mq: open channel: %w", ctx.Err())
		}
	}
}

// bounded runs fn, which makes amqp091-go calls that take no context, so
// that ctx bounds the wait: those calls return on a network gone quiet only
// when the heartbeat declares the connection dead, after up to three
// intervals. When ctx ends first, bounded returns ctx's error and fn
// carries on, on a goroutine the broker owns, until the broker answers or
// the connection dies (Close aborts it); abandoned then runs on that
// goroutine, to undo what fn did (close the channel it opened). A ctx that
// never ends costs no goroutine.
func (b *Broker) bounded(ctx context.Context, fn func() error, abandoned func()) error {
	if ctx.Done() == nil {
		return fn()
	}
	if err := ctx.Err(); err != nil {
		if abandoned != nil && !b.spawn(abandoned) { // fn never ran: undo what led to it
			abandoned()
		}
		return err
	}
	var claimed atomic.Bool // by the goroutine to deliver fn's result, or by the caller to give up
	res := make(chan error, 1)
	if !b.spawn(func() {
		err := fn()
		if claimed.CompareAndSwap(false, true) {
			res <- err
			return
		}
		if abandoned != nil {
			abandoned()
		}
	}) {
		return fn() // closed: the connection is gone, fn returns at once
	}
	select {
	case err := <-res:
		return err
	case <-ctx.Done():
		if claimed.CompareAndSwap(false, true) {
			return ctx.Err()
		}
		return <-res // fn finished as ctx ended: its result stands
	}
}

// closeLater closes a throwaway channel on a goroutine the broker owns:
// nobody needs to wait for the broker's close-ok.
func (b *Broker) closeLater(ch *amqp.Channel) {
	if !b.spawn(func() { _ = ch.Close() }) {
		_ = ch.Close()
	}
}

// spawn runs fn on a goroutine Close waits for, unless Close is already
// waiting; then it reports false and starts nothing.
func (b *Broker) spawn(fn func()) bool {
	b.mu.Lock()
	if b.callsEnded {
		b.mu.Unlock()
		return false
	}
	b.calls.Add(1)
	b.mu.Unlock()
	go func() {
		defer b.calls.Done()
		fn()
	}()
	return true
}

// confirmChannel opens a channel in confirm mode on the live connection,
// on the next one when the connection goes as it does.
func (b *Broker) confirmChannel(ctx context.Context) (*amqp.Channel, *conn, error) {
	for {
		ch, st, err := b.channel(ctx)
		if err != nil {
			return nil, nil, err
		}
		err = b.bounded(ctx, func() error { return ch.Confirm(false) }, func() { _ = ch.Close() })
		if err == nil {
			return ch, st, nil
		}
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			return nil, nil, fmt.Errorf("mq: put channel in confirm mode: %w", err)
		}
		b.closeLater(ch)
		if !st.isLost() {
			return nil, nil, brokerError("put channel in confirm mode", err)
		}
	}
}

// ready returns the channel to queue publishes on: the live one, read
// without a lock, or one opened now. It waits out a blocked connection,
// bounded by ctx, and fails at once on an ended ctx.
func (p *Publisher) ready(ctx context.Context, key string) (*pubChannel, error) {
	for {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("mq: publish to %s: %w (nothing was sent)", p.dest(key), err)
		}
		pc := p.live.Load()
		if pc == nil || pc.ended() || pc.nacked.Load() {
			var err error
			if pc, err = p.open(ctx, key); err != nil {
				return nil, err
			}
		}
		if !pc.st.blocked.Load() {
			return pc, nil
		}
		if err := pc.st.waitUnblocked(ctx); err != nil {
			return nil, err
		}
		if pc.st.isLost() && !pc.waitDone(ctx) { // unblocked by the connection's end: wait for a fresh channel
			return nil, fmt.Errorf("mq: publish to %s: %w (nothing was sent)", p.dest(key), ctx.Err())
		}
	}
}

// open opens a channel when there is no usable one, one caller at a time
// (p.sem): the others wait for it rather than open their own.
func (p *Publisher) open(ctx context.Context, key string) (*pubChannel, error) {
	select {
	case p.sem <- struct{}{}:
	case <-ctx.Done():
		// Another publish is opening the channel, most likely waiting out
		// a resource alarm or a connection that is not there: say so
		// rather than only "deadline exceeded".
		return nil, p.b.stateNow().blockedErr(fmt.Errorf("mq: publish to %s: %w", p.dest(key), ctx.Err()))
	}
	defer func() { <-p.sem }()
	if err := ctx.Err(); err != nil { // the select may pick the semaphore when both are ready
		return nil, fmt.Errorf("mq: publish to %s: %w (nothing was sent)", p.dest(key), err)
	}
	if pc := p.live.Load(); pc == nil || pc.ended() || pc.nacked.Load() {
		// About to open a channel: a blocked connection would not answer
		// channel.open, so wait out the alarm here, with its reason.
		if st := p.b.stateNow(); st != nil {
			if err := st.waitUnblocked(ctx); err != nil {
				return nil, err
			}
		}
	}
	return p.channel(ctx)
}

// channel returns the live confirm-mode channel, opening one if needed.
// The caller holds p.sem.
func (p *Publisher) channel(ctx context.Context) (*pubChannel, error) {
	pc := p.live.Load()
	if pc != nil && !pc.ended() && !pc.nacked.Load() {
		return pc, nil
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, ErrClosed
	}
	// Open, so nacked: a channel the broker keeps nacking on (see
	// retireAfterNacks). New publishes go to a fresh one, and this one
	// closes once what is in flight on it has its answer — closing it now
	// would resend those and make duplicates.
	retire := pc != nil && !pc.ended()
	if retire {
		p.retired = append(slices.DeleteFunc(p.retired, (*pubChannel).ended), pc)
		p.live.Store(nil)
	}
	p.mu.Unlock()
	if retire {
		pc.retire(p.b)
	}
	ch, st, err := p.b.confirmChannel(ctx)
	if err != nil {
		return nil, err
	}
	pc = &pubChannel{ch: ch, st: st, exchange: p.exchange, over: make(chan struct{}),
		writeKick: make(chan struct{}, 1), writeDone: make(chan struct{}), wakeKick: make(chan struct{}, 1), wakeDone: make(chan struct{})}
	// Two unbuffered return listeners: amqp091-go hands a return to
	// each in turn, so it cannot go on to the ack that follows before
	// the watcher took the second, which it does only once the first
	// is recorded.
	r1 := ch.NotifyReturn(make(chan amqp.Return))
	r2 := ch.NotifyReturn(make(chan amqp.Return))
	closes := ch.NotifyClose(make(chan *amqp.Error, 1))
	go pc.watch(closes, r1, r2)
	go pc.writer(p.mandatory)
	go pc.waker()
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		_ = ch.Close()
		<-pc.over
		<-pc.writeDone
		<-pc.wakeDone
		return nil, ErrClosed
	}
	p.live.Store(pc)
	p.mu.Unlock()
	return pc, nil
}
