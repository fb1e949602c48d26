package mq

import (
	"context"
	"errors"
	"fmt"
	"sync"

	amqp "github.com/rabbitmq/amqp091-go"
)

// errResend tells a waiting publish that its channel died with the
// connection before the broker confirmed it: send it again on the next one.
var errResend = errors.New("mq: channel lost before confirm")

// PublisherOption configures a Publisher.
type PublisherOption interface{ applyPublisher(*Publisher) }

type publisherOption func(*Publisher)

func (f publisherOption) applyPublisher(p *Publisher) { f(p) }

// Mandatory asks the broker to return a publish no queue is bound for; the
// publish then fails with ErrUnroutable. Always on for the library's own
// hops, and on by default for a publisher on the default exchange (""),
// where unroutable means the queue does not exist.
func Mandatory() PublisherOption {
	return publisherOption(func(p *Publisher) { p.mandatory = true })
}

// AsHop marks every publish of the publisher as a hop of the given kind for
// the hooks (a replay tool publishes with AsHop(HopReplay)). It implies
// Mandatory.
func AsHop(kind HopKind) PublisherOption {
	return publisherOption(func(p *Publisher) { p.hop, p.mandatory = kind, true })
}

// Publisher publishes to one exchange on a channel of its own, in confirm
// mode. Publish returns once the broker has confirmed the message. It is
// safe for many goroutines at once, and pipelined: concurrent publishes
// share the channel's confirm stream without waiting for each other.
//
// A publish in flight when the connection dies is sent again on the next
// connection until its context ends. Delivery is therefore at least once: a
// message the broker took just before the connection died can arrive twice.
type Publisher struct {
	b         *Broker
	exchange  string
	mandatory bool
	hop       HopKind

	sem    chan struct{} // one writer at a time: sequence numbers and sends stay in step
	mu     sync.Mutex
	cur    *pubChannel
	closed bool
}

// Publisher returns a publisher to exchange ("" is the default exchange,
// where the routing key is a queue name). It opens its channel on first
// use. Close it when done (Broker.Close closes the ones still open).
func (b *Broker) Publisher(exchange string, opts ...PublisherOption) *Publisher {
	p := &Publisher{b: b, exchange: exchange, mandatory: exchange == "", sem: make(chan struct{}, 1)}
	for _, o := range opts {
		if o != nil {
			o.applyPublisher(p)
		}
	}
	if err := b.register(p, nil); err != nil {
		p.closed = true
	}
	return p
}

// Exchange is the exchange the publisher publishes to.
func (p *Publisher) Exchange() string { return p.exchange }

// Publish sends m to the publisher's exchange with routingKey and returns
// once the broker confirmed it. Errors: ErrNacked when the broker refused
// it, ErrUnroutable when a mandatory publish came back, ctx's error when ctx
// ended first (the message may or may not have been taken), ErrClosed, or a
// *BrokerError (say, the exchange does not exist). While the broker blocks
// publishing (a resource alarm), Publish waits, bounded by ctx.
func (p *Publisher) Publish(ctx context.Context, routingKey string, m Message) error {
	return p.publish(ctx, routingKey, m, p.hop)
}

func (p *Publisher) publish(ctx context.Context, key string, m Message, hop HopKind) error {
	if len(p.b.hooks.publish) == 0 {
		return p.send(ctx, key, m.publishing())
	}
	m.Headers = cloneHeaders(m.Headers)
	if m.Headers == nil {
		m.Headers = amqp.Table{}
	}
	pub := m.publishing() // defaults first, so hooks see the message id
	info := &Publishing{Exchange: p.exchange, RoutingKey: key, Mandatory: p.mandatory, Hop: hop, Message: &m, Server: p.server()}
	hctx := ctx
	for _, h := range p.b.hooks.publish {
		hctx = h.OnPublish(hctx, info)
	}
	pub.Headers = m.Headers
	err := p.send(ctx, key, pub)
	for i := len(p.b.hooks.publish) - 1; i >= 0; i-- {
		p.b.hooks.publish[i].OnPublishDone(hctx, info, err)
	}
	return err
}

func (p *Publisher) server() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cur != nil {
		return p.cur.st.server
	}
	if st := p.b.stateNow(); st != nil {
		return st.server
	}
	return ""
}

// send writes pub and waits for its confirm, resending after a lost
// connection until ctx ends.
func (p *Publisher) send(ctx context.Context, key string, pub amqp.Publishing) error {
	for {
		w, err := p.write(ctx, key, pub)
		if err != nil {
			return err
		}
		select {
		case err := <-w.res:
			if err == errResend {
				continue
			}
			return p.wrap(key, err)
		case <-ctx.Done():
			return fmt.Errorf("mq: publish to %s: no confirm yet: %w", p.dest(key), ctx.Err())
		}
	}
}

func (p *Publisher) dest(key string) string {
	if p.exchange == "" {
		return fmt.Sprintf("queue %q", key)
	}
	return fmt.Sprintf("exchange %q with key %q", p.exchange, key)
}

func (p *Publisher) wrap(key string, err error) error {
	if err == nil {
		return nil
	}
	var be *BrokerError
	if errors.As(err, &be) {
		return err
	}
	return fmt.Errorf("mq: publish to %s: %w", p.dest(key), err)
}

// write sends one publish on the current channel (opening one if needed)
// and returns the waiter its confirm will resolve.
func (p *Publisher) write(ctx context.Context, key string, pub amqp.Publishing) (*waiter, error) {
	fp := ""
	if p.mandatory {
		fp = key + "\x00" + pub.MessageId
	}
	for {
		select {
		case p.sem <- struct{}{}:
		case <-ctx.Done():
			return nil, fmt.Errorf("mq: publish to %s: %w", p.dest(key), ctx.Err())
		}
		pc, err := p.channel(ctx)
		if err == nil {
			err = pc.st.waitUnblocked(ctx)
		}
		if err != nil {
			<-p.sem
			return nil, err
		}
		seq := pc.ch.GetNextPublishSeqNo()
		w := pc.add(seq, fp)
		err = pc.ch.Publish(p.exchange, key, p.mandatory, false, pub)
		<-p.sem
		if err == nil {
			return w, nil
		}
		pc.remove(w)
		if errors.Is(err, amqp.ErrClosed) || pc.ch.IsClosed() {
			// The channel died under us; the listener will notice. Try on
			// a fresh one (the connection may be coming back).
			pc.waitDone(ctx)
			continue
		}
		return nil, fmt.Errorf("mq: publish to %s: %w", p.dest(key), err)
	}
}

// channel returns the live confirm-mode channel, opening one if needed.
// The caller holds p.sem.
func (p *Publisher) channel(ctx context.Context) (*pubChannel, error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, ErrClosed
	}
	pc := p.cur
	p.mu.Unlock()
	if pc != nil && !pc.ended() {
		return pc, nil
	}
	for {
		ch, st, err := p.b.channel(ctx)
		if err != nil {
			return nil, err
		}
		if err := ch.Confirm(false); err != nil {
			_ = ch.Close()
			if st.isLost() {
				continue
			}
			return nil, brokerError("put channel in confirm mode", err)
		}
		pc = &pubChannel{ch: ch, st: st, pending: map[uint64]*waiter{}, byFP: map[string]*waiter{}, done: make(chan struct{})}
		confirms := ch.NotifyPublish(make(chan amqp.Confirmation, 256))
		returns := ch.NotifyReturn(make(chan amqp.Return, 16))
		closes := ch.NotifyClose(make(chan *amqp.Error, 1))
		go pc.listen(p.exchange, confirms, returns, closes)
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			_ = ch.Close()
			<-pc.done
			return nil, ErrClosed
		}
		p.cur = pc
		p.mu.Unlock()
		return pc, nil
	}
}

// Close closes the publisher's channel. Publishes still waiting for a
// confirm fail with ErrClosed. Close is idempotent.
func (p *Publisher) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	pc := p.cur
	p.mu.Unlock()
	if pc != nil {
		_ = pc.ch.Close()
		<-pc.done
	}
	p.b.unregister(p, nil)
}

// BatchError reports which publishes of a batch failed.
type BatchError struct {
	// Errs has one entry per message of the batch: nil where it was
	// confirmed.
	Errs []error
}

func (e *BatchError) Error() string {
	n, first := 0, error(nil)
	for _, err := range e.Errs {
		if err != nil {
			if first == nil {
				first = err
			}
			n++
		}
	}
	return fmt.Sprintf("mq: %d of %d publishes failed; first: %v", n, len(e.Errs), first)
}

// Unwrap returns the failures, so errors.Is(err, ErrUnroutable) asks
// whether any publish came back.
func (e *BatchError) Unwrap() []error {
	var out []error
	for _, err := range e.Errs {
		if err != nil {
			out = append(out, err)
		}
	}
	return out
}

// PublishBatch sends every message with routingKey without waiting between
// them, then waits for all their confirms: the fast way to publish in bulk.
// It returns nil when every message was confirmed, or a *BatchError saying
// which ones failed and why. Messages in flight when the connection dies are
// sent again, as with Publish.
func (p *Publisher) PublishBatch(ctx context.Context, routingKey string, msgs []Message) error {
	type slot struct {
		w    *waiter
		pub  amqp.Publishing
		info *Publishing
		hctx context.Context
	}
	hooks := p.b.hooks.publish
	slots := make([]slot, len(msgs))
	errs := make([]error, len(msgs))
	failed := false
	for i := range msgs {
		s := &slots[i]
		m := msgs[i]
		if len(hooks) > 0 {
			m.Headers = cloneHeaders(m.Headers)
			if m.Headers == nil {
				m.Headers = amqp.Table{}
			}
		}
		s.pub = m.publishing()
		if len(hooks) > 0 {
			s.info = &Publishing{Exchange: p.exchange, RoutingKey: routingKey, Mandatory: p.mandatory, Hop: p.hop, Message: &m}
			s.hctx = ctx
			for _, h := range hooks {
				s.hctx = h.OnPublish(s.hctx, s.info)
			}
			s.pub.Headers = m.Headers
		}
		if failed {
			errs[i] = errs[i-1]
			continue
		}
		s.w, errs[i] = p.write(ctx, routingKey, s.pub)
		failed = errs[i] != nil
	}
	for i := range slots {
		s := &slots[i]
		if s.w != nil {
			select {
			case err := <-s.w.res:
				if err == errResend {
					err = p.send(ctx, routingKey, s.pub)
				}
				errs[i] = p.wrap(routingKey, err)
			case <-ctx.Done():
				errs[i] = fmt.Errorf("mq: publish to %s: no confirm yet: %w", p.dest(routingKey), ctx.Err())
			}
		}
		for j := len(hooks) - 1; j >= 0; j-- {
			hooks[j].OnPublishDone(s.hctx, s.info, errs[i])
		}
	}
	for _, err := range errs {
		if err != nil {
			return &BatchError{Errs: errs}
		}
	}
	return nil
}

// waiter is one publish waiting for its confirm.
type waiter struct {
	seq      uint64
	fp       string  // routing key and message id, for mandatory publishes
	nextFP   *waiter // the next pending publish with the same fingerprint
	returned bool
	res      chan error // buffered: the listener never blocks on it
}

// pubChannel is one channel of a publisher and its confirm bookkeeping.
type pubChannel struct {
	ch   *amqp.Channel
	st   *conn
	done chan struct{} // closed when the listener has settled everything

	mu      sync.Mutex
	pending map[uint64]*waiter
	byFP    map[string]*waiter
	over    bool
}

func (pc *pubChannel) add(seq uint64, fp string) *waiter {
	w := &waiter{seq: seq, fp: fp, res: make(chan error, 1)}
	pc.mu.Lock()
	if pc.over { // the channel already ended: nothing will confirm this
		pc.mu.Unlock()
		w.res <- errResend
		return w
	}
	pc.pending[seq] = w
	if fp != "" {
		if head := pc.byFP[fp]; head != nil {
			for head.nextFP != nil {
				head = head.nextFP
			}
			head.nextFP = w
		} else {
			pc.byFP[fp] = w
		}
	}
	pc.mu.Unlock()
	return w
}

// remove forgets w (its publish was never sent).
func (pc *pubChannel) remove(w *waiter) {
	pc.mu.Lock()
	delete(pc.pending, w.seq)
	pc.unlinkLocked(w)
	pc.mu.Unlock()
}

func (pc *pubChannel) unlinkLocked(w *waiter) {
	if w.fp == "" {
		return
	}
	head := pc.byFP[w.fp]
	if head == w {
		if w.nextFP == nil {
			delete(pc.byFP, w.fp)
		} else {
			pc.byFP[w.fp] = w.nextFP
		}
		return
	}
	for ; head != nil; head = head.nextFP {
		if head.nextFP == w {
			head.nextFP = w.nextFP
			return
		}
	}
}

func (pc *pubChannel) ended() bool {
	select {
	case <-pc.done:
		return true
	default:
		return pc.ch.IsClosed()
	}
}

func (pc *pubChannel) waitDone(ctx context.Context) {
	select {
	case <-pc.done:
	case <-ctx.Done():
	}
}

// listen resolves confirms and correlates returns. One goroutine reads both
// notification channels: amqp091-go hands over a basic.return before it
// processes the basic.ack that follows it, so the return is always recorded
// before the confirm that settles the same publish.
func (pc *pubChannel) listen(exchange string, confirms chan amqp.Confirmation, returns chan amqp.Return, closes chan *amqp.Error) {
	defer close(pc.done)
	for {
		select {
		case r, ok := <-returns:
			if !ok {
				returns = nil
				continue
			}
			pc.onReturn(r)
		case c, ok := <-confirms:
			if !ok {
				var e *amqp.Error
				select {
				case e = <-closes:
				default:
				}
				pc.finish(exchange, e)
				return
			}
			pc.onConfirm(c)
		}
	}
}

func (pc *pubChannel) onReturn(r amqp.Return) {
	fp := r.RoutingKey + "\x00" + r.MessageId
	pc.mu.Lock()
	for w := pc.byFP[fp]; w != nil; w = w.nextFP {
		if !w.returned {
			w.returned = true
			break
		}
	}
	pc.mu.Unlock()
}

func (pc *pubChannel) onConfirm(c amqp.Confirmation) {
	pc.mu.Lock()
	w := pc.pending[c.DeliveryTag]
	if w != nil {
		delete(pc.pending, c.DeliveryTag)
		pc.unlinkLocked(w)
	}
	pc.mu.Unlock()
	if w == nil {
		return
	}
	switch {
	case !c.Ack:
		w.res <- ErrNacked
	case w.returned:
		w.res <- ErrUnroutable
	default:
		w.res <- nil
	}
}

// finish settles every publish still pending when the channel ends: a
// channel exception (the exchange does not exist, say) is final for them; a
// lost connection or a closed channel means send again.
func (pc *pubChannel) finish(exchange string, e *amqp.Error) {
	var res error = errResend
	if e != nil && channelLevel(e) && !pc.st.isLost() {
		op := fmt.Sprintf("publish to exchange %q", exchange)
		if exchange == "" {
			op = "publish to the default exchange"
		}
		res = brokerError(op, e)
	}
	pc.mu.Lock()
	pending := pc.pending
	pc.pending, pc.byFP, pc.over = map[uint64]*waiter{}, map[string]*waiter{}, true
	pc.mu.Unlock()
	for _, w := range pending {
		w.res <- res
	}
}
