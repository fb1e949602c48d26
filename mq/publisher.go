package mq

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

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
// publish then fails with ErrUnroutable. It is the default for every
// publisher (so a nil from Publish means some queue holds the message);
// the option remains to say so explicitly, and undoes AllowUnroutable.
func Mandatory() PublisherOption {
	return publisherOption(func(p *Publisher) { p.mandatory = true })
}

// AllowUnroutable makes the publisher's publishes fire-and-forget as far as
// routing goes: a message no queue is bound for is confirmed and dropped by
// the broker, and Publish returns nil for it. For events that may have no
// audience (a topic nobody subscribes to yet). Off by default: without it a
// publish no queue is bound for fails with ErrUnroutable. The library's own
// hops are always mandatory.
func AllowUnroutable() PublisherOption {
	return publisherOption(func(p *Publisher) {
		if p.hop == HopNone {
			p.mandatory = false
		}
	})
}

// AsHop marks every publish of the publisher as a hop of the given kind for
// the hooks (a replay tool publishes with AsHop(HopReplay)). It implies
// Mandatory.
func AsHop(kind HopKind) PublisherOption {
	return publisherOption(func(p *Publisher) { p.hop, p.mandatory = kind, true })
}

// Publisher publishes to one exchange on a channel of its own, in confirm
// mode, mandatory unless AllowUnroutable was given. Publish returns nil
// once the broker has confirmed the message and routed it to at least one
// queue. It is safe for many goroutines at once, and pipelined: concurrent
// publishes share the channel's confirm stream without waiting for each
// other (two mandatory publishes with the same routing key and message id
// wait for each other, so a basic.return is credited to exactly the
// publish that caused it).
//
// Every publish is validated before it reaches the wire (see ErrInvalid):
// input the wire cannot carry fails its own call and nothing else.
//
// A publish in flight when the connection dies is sent again on the next
// connection until its context ends. Delivery is therefore at least once: a
// message the broker took just before the connection died can arrive twice.
// When the broker refuses a publish by closing the channel (a missing
// exchange, say), the other publishes that were in flight on that channel
// are each sent again alone, so only the publish that caused the refusal
// gets it (the others may arrive twice).
type Publisher struct {
	b         *Broker
	exchange  string
	mandatory bool
	hop       HopKind

	sem     chan struct{}              // one writer at a time: sequence numbers and sends stay in step
	solos   chan struct{}              // publishes resent alone after a refusal beside them (see solo)
	live    atomic.Pointer[pubChannel] // cur while open, read without the lock on every publish
	mu      sync.Mutex
	cur     *pubChannel
	retired []*pubChannel // retired channels, closed as they drain (or at Close)
	closed  bool
}

// Publisher returns a publisher to exchange ("" is the default exchange,
// where the routing key is a queue name). It opens its channel on first
// use. Close it when done (Broker.Close closes the ones still open).
func (b *Broker) Publisher(exchange string, opts ...PublisherOption) *Publisher {
	p := &Publisher{b: b, exchange: exchange, mandatory: true, sem: make(chan struct{}, 1), solos: make(chan struct{}, maxSolos)}
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
// once the broker confirmed it. Errors: ErrInvalid when m (or the routing
// key) cannot be carried by the wire — nothing was sent; ErrNacked when the
// broker refused it; ErrUnroutable when no queue was bound for it (see
// AllowUnroutable); ctx's error when ctx ended first (the message may or
// may not have been taken; when ctx had ended before the call, nothing was
// sent); ErrClosed; or a *BrokerError (say, the exchange does not exist).
// While the broker blocks publishing (a resource alarm), Publish waits,
// bounded by ctx. Publish returns by ctx's deadline even when the socket
// under it stopped draining: the write then finishes or fails in the
// background, and the Publisher carries on once the connection is replaced.
func (p *Publisher) Publish(ctx context.Context, routingKey string, m Message) error {
	return p.publish(ctx, routingKey, m, p.hop)
}

func (p *Publisher) publish(ctx context.Context, key string, m Message, hop HopKind) error {
	if len(p.b.hooks.publish) == 0 {
		cp, err := p.check(key, m.publishing(), hop)
		if err != nil {
			return err
		}
		return p.send(ctx, key, cp)
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
	cp, err := p.check(key, pub, hop)
	if err == nil {
		err = p.send(ctx, key, cp)
	}
	for i := len(p.b.hooks.publish) - 1; i >= 0; i-- {
		p.b.hooks.publish[i].OnPublishDone(hctx, info, err)
	}
	return err
}

// check runs the validator on one publish; a hop is trimmed to fit the
// frame (fitHop) rather than refused.
func (p *Publisher) check(key string, pub amqp.Publishing, hop HopKind) (checkedPublish, error) {
	cp, err := checkPublish(p.exchange, key, pub)
	if err == nil && hop != HopNone {
		cp, err = fitHop(p.exchange, key, cp, p.b.frameMax())
	}
	if err != nil {
		return checkedPublish{}, fmt.Errorf("mq: publish to %s: %w", p.dest(key), err)
	}
	return cp, nil
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

// send writes a validated publish and waits for its confirm, resending
// after a lost connection until ctx ends, and alone after a refusal that
// may have been another publish's.
func (p *Publisher) send(ctx context.Context, key string, cp checkedPublish) error {
	for {
		f, err := p.write(ctx, key, cp)
		if err != nil {
			return err
		}
		err = f.await(ctx)
		if err == errResend {
			continue
		}
		if shared, ok := err.(*sharedRefusal); ok {
			return p.wrap(key, p.solo(ctx, key, cp, shared))
		}
		return p.wrap(key, err)
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

// flight is one publish sent and not yet settled.
type flight struct {
	pc        *pubChannel
	dc        *amqp.DeferredConfirmation
	seq       uint64 // mandatory publishes: its place in pc's queue of returnable publishes
	mandatory bool
}

// write sends one publish on the current channel (opening one if needed).
// The publish was validated before, so a failed send means the channel or
// its connection broke: the publish goes out again on the next one. A ctx
// that has ended sends nothing.
func (p *Publisher) write(ctx context.Context, key string, cp checkedPublish) (flight, error) {
	for {
		select {
		case p.sem <- struct{}{}:
		case <-ctx.Done():
			// Another publish holds the channel, most likely waiting out a
			// resource alarm or a socket that stopped draining: say so
			// rather than only "deadline exceeded".
			return flight{}, p.b.stateNow().blockedErr(fmt.Errorf("mq: publish to %s: %w", p.dest(key), ctx.Err()))
		}
		if err := ctx.Err(); err != nil { // the select may pick the semaphore when both are ready
			<-p.sem
			return flight{}, fmt.Errorf("mq: publish to %s: %w (nothing was sent)", p.dest(key), err)
		}
		if pc := p.live.Load(); pc == nil || pc.ended() || pc.nacked.Load() {
			st := p.b.stateNow()
			// About to open a channel: a blocked connection would not answer
			// channel.open, so wait out the alarm here, with its reason.
			if st != nil {
				if err := st.waitUnblocked(ctx); err != nil {
					<-p.sem
					return flight{}, err
				}
			}
		}
		pc, err := p.channel(ctx)
		if err == nil {
			err = pc.st.waitUnblocked(ctx)
		}
		if err != nil {
			<-p.sem
			return flight{}, err
		}
		if err := cp.fitsFrame(pc.st.frameMax()); err != nil {
			<-p.sem
			return flight{}, fmt.Errorf("mq: publish to %s: %w", p.dest(key), err)
		}
		var seq uint64
		if p.mandatory {
			var busy *amqp.DeferredConfirmation
			var ok bool
			seq, busy, ok = pc.tryAdd(fingerprint{key, cp.pub.MessageId})
			if !ok {
				// A publish with the same routing key and message id is in
				// flight: a return could not be told apart. Wait for its
				// confirm, then go again.
				<-p.sem
				if err := waitConfirm(ctx, busy, pc); err != nil {
					return flight{}, fmt.Errorf("mq: publish to %s: %w (nothing was sent: waiting for a publish with the same message id)", p.dest(key), err)
				}
				continue
			}
		}
		pub := cp.pub
		one := [1]pubItem{{pub: &pub, seq: seq}}
		if p.put(ctx, pc, key, one[:]) {
			return flight{}, errAbandoned(p.dest(key), ctx.Err())
		}
		dc, err := one[0].dc, one[0].err
		if err == nil && dc != nil {
			return flight{pc: pc, dc: dc, seq: seq, mandatory: p.mandatory}, nil
		}
		if p.mandatory {
			pc.done(seq) // never sent
		}
		if err == nil { // cannot happen: the channel is in confirm mode
			return flight{}, fmt.Errorf("mq: publish to %s: the channel is not in confirm mode", p.dest(key))
		}
		if !pc.ended() && !pc.st.isLost() && isCallerError(err) {
			// amqp091-go refused to write it; the connection is intact.
			return flight{}, fmt.Errorf("mq: publish to %s: %w: %w", p.dest(key), ErrInvalid, err)
		}
		// The channel died under us, or its connection did (a write error
		// comes before the reader notices the loss). Wait for the channel's
		// end, then try on a fresh one: the connection may be coming back.
		if !pc.waitDone(ctx) {
			return flight{}, fmt.Errorf("mq: publish to %s: %w (after %v)", p.dest(key), ctx.Err(), err)
		}
	}
}

// waitConfirm waits for dc (nil: none to wait for), the end of pc, or ctx.
func waitConfirm(ctx context.Context, dc *amqp.DeferredConfirmation, pc *pubChannel) error {
	if dc == nil {
		return ctx.Err()
	}
	select {
	case <-dc.Done():
	case <-pc.over:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// writeMany writes the publishes at idx of cps (a batch's, all to key) in
// one go on the current channel, as far as it can without two equal
// fingerprints in flight, and fills flights and errs for those it handled
// (errResend: write it again on its own). It returns how many of idx it
// handled: 0 with err nil means the first must go through write (it waits
// for a publish with its fingerprint); err is the whole write's failure.
func (p *Publisher) writeMany(ctx context.Context, key string, cps []checkedPublish, idx []int, flights []flight, errs []error) (int, error) {
	select {
	case p.sem <- struct{}{}:
	case <-ctx.Done():
		return 0, p.b.stateNow().blockedErr(fmt.Errorf("mq: publish to %s: %w", p.dest(key), ctx.Err()))
	}
	if err := ctx.Err(); err != nil {
		<-p.sem
		return 0, fmt.Errorf("mq: publish to %s: %w (nothing was sent)", p.dest(key), err)
	}
	if st := p.b.stateNow(); st != nil {
		if err := st.waitUnblocked(ctx); err != nil {
			<-p.sem
			return 0, err
		}
	}
	pc, err := p.channel(ctx)
	if err == nil {
		err = pc.st.waitUnblocked(ctx)
	}
	if err != nil {
		<-p.sem
		return 0, err
	}
	frameMax := pc.st.frameMax()
	items := make([]pubItem, 0, len(idx))
	sent := make([]int, 0, len(idx))
	n := 0
	for _, i := range idx {
		if err := cps[i].fitsFrame(frameMax); err != nil {
			errs[i] = fmt.Errorf("mq: publish to %s: %w", p.dest(key), err)
			n++
			continue
		}
		var seq uint64
		if p.mandatory {
			var ok bool
			if seq, _, ok = pc.tryAdd(fingerprint{key, cps[i].pub.MessageId}); !ok {
				break
			}
		}
		items = append(items, pubItem{pub: &cps[i].pub, seq: seq})
		sent = append(sent, i)
		n++
	}
	if len(items) == 0 {
		<-p.sem
		return n, nil
	}
	if p.put(ctx, pc, key, items) {
		for _, i := range sent {
			errs[i] = errAbandoned(p.dest(key), ctx.Err())
		}
		return n, nil
	}
	for k, it := range items {
		i := sent[k]
		if it.err == nil && it.dc != nil {
			flights[i] = flight{pc: pc, dc: it.dc, seq: it.seq, mandatory: p.mandatory}
			continue
		}
		if p.mandatory {
			pc.done(it.seq) // never sent
		}
		errs[i] = errResend
	}
	return n, nil
}

func errAbandoned(dest string, err error) error {
	return fmt.Errorf("mq: publish to %s: %w (the write to the socket had not finished: the message may or may not reach the broker)", dest, err)
}

// isCallerError reports an error amqp091-go returns before writing
// anything (the validator is meant to catch these first).
func isCallerError(err error) bool {
	return errors.Is(err, amqp.ErrFieldType)
}

// pubItem is one publish of a write: what to send and, once written, its
// confirmation or the write's error.
type pubItem struct {
	pub *amqp.Publishing
	seq uint64
	dc  *amqp.DeferredConfirmation
	err error
}

// pubReq is a write handed to a channel's writer goroutine: one publish,
// or a batch's run of them.
type pubReq struct {
	key     string
	items   []pubItem
	claimed atomic.Bool // by the writer to deliver, or by the caller to give up
	done    chan struct{}
}

// put writes items (in order) on pc and releases p.sem once the write is
// over. With a ctx that can end, the write happens on pc's writer
// goroutine, so that a socket that stopped draining cannot hold the caller
// past ctx's end: abandoned then reports that the caller gave up mid-write
// (the write finishes or fails later; its outcome is nobody's). Otherwise
// each item holds its confirmation or its write error.
func (p *Publisher) put(ctx context.Context, pc *pubChannel, key string, items []pubItem) (abandoned bool) {
	if ctx.Done() == nil {
		pc.publishAll(key, p.mandatory, items)
		<-p.sem
		return false
	}
	r := &pubReq{key: key, items: items, done: make(chan struct{})}
	select {
	case pc.reqs <- r:
	case <-pc.over:
		<-p.sem
		for k := range items {
			items[k].err = amqp.ErrClosed
		}
		return false
	case <-ctx.Done():
		<-p.sem
		if p.mandatory {
			for _, it := range items {
				pc.done(it.seq)
			}
		}
		return true
	}
	select {
	case <-r.done:
		return false
	case <-ctx.Done():
		if r.claimed.CompareAndSwap(false, true) {
			return true
		}
		<-r.done // the writer finished as ctx ended: its result stands
		return false
	}
}

// publishAll writes items on the channel and records each.
func (pc *pubChannel) publishAll(key string, mandatory bool, items []pubItem) {
	for k := range items {
		it := &items[k]
		it.dc, it.err = pc.ch.PublishWithDeferredConfirm(pc.exchange, key, mandatory, false, *it.pub)
		if mandatory {
			pc.sent(it.seq, it.dc) // before the next publish: see onReturn
		}
		if it.err == nil && it.dc != nil {
			pc.inflight.Add(1)
		}
	}
}

// writer runs the writes of publishes whose context can end (see put),
// until the channel ends.
func (pc *pubChannel) writer(p *Publisher) {
	defer close(pc.wdone)
	for {
		select {
		case r := <-pc.reqs:
			pc.publishAll(r.key, p.mandatory, r.items)
			<-p.sem
			if r.claimed.CompareAndSwap(false, true) {
				close(r.done)
				continue
			}
			// The caller gave up mid-write: settle the bookkeeping alone.
			for _, it := range r.items {
				switch {
				case it.err == nil && it.dc != nil:
					if p.mandatory {
						pc.abandon(it.seq)
					}
					pc.landed()
				case p.mandatory:
					pc.done(it.seq)
				}
			}
		case <-pc.over:
			return
		}
	}
}

// await waits for f's confirm and says what became of it: nil, ErrNacked,
// ErrUnroutable, a refusal that ended the channel, errResend when the
// channel ended first, or ctx's error.
func (f flight) await(ctx context.Context) error {
	defer f.pc.landed()
	if isDone(f.dc) { // settled already: that wins over an ended ctx
		return f.settled(ctx)
	}
	select {
	case <-f.dc.Done():
		return f.settled(ctx)
	case <-ctx.Done():
		if f.mandatory {
			f.pc.abandon(f.seq)
		}
		return f.pc.st.blockedErr(fmt.Errorf("no confirm yet: %w", ctx.Err()))
	}
}

// settled reads the outcome of a flight whose deferred confirmation is
// done. amqp091-go settles deferred confirmations exactly by delivery tag
// (unlike the Confirmation values NotifyPublish hands over, where a nack
// that comes ahead of an ack with multiple set is reported as an ack), and
// it hands a basic.return to every return listener before it reads the
// basic.ack that follows: the watcher has recorded the return by then.
func (f flight) settled(ctx context.Context) error {
	returned := f.mandatory && f.pc.done(f.seq)
	if f.dc.Acked() {
		f.pc.nacks.Store(0)
		if returned {
			return ErrUnroutable
		}
		return nil
	}
	if !f.pc.ch.IsClosed() {
		if f.pc.nacks.Add(1) >= retireAfterNacks {
			f.pc.nacked.Store(true)
		}
		return ErrNacked
	}
	// The channel ended, which settles everything pending as not acked:
	// that says nothing about the message. A channel exception (the
	// exchange does not exist) may have been caused by this publish or by
	// another in flight beside it; a lost connection or a closed channel
	// means send again.
	if !f.pc.waitDone(ctx) {
		return fmt.Errorf("no confirm yet: %w", ctx.Err())
	}
	return f.pc.endErr()
}

// sharedRefusal is a channel exception that ended a channel with more than
// one publish in flight: it may be another publish's.
type sharedRefusal struct{ err error }

func (e *sharedRefusal) Error() string { return e.err.Error() }
func (e *sharedRefusal) Unwrap() error { return e.err }

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
	ch, st, err := p.b.channel(ctx)
	if err != nil {
		return err
	}
	defer p.b.closeLater(ch)
	if err := p.b.bounded(ctx, func() error { return ch.Confirm(false) }, func() { _ = ch.Close() }); err != nil {
		if ctx.Err() != nil {
			return err
		}
		if st.isLost() {
			return errResend
		}
		return brokerError("put channel in confirm mode", err)
	}
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

func publishOp(exchange string) string {
	if exchange == "" {
		return "publish to the default exchange"
	}
	return fmt.Sprintf("publish to exchange %q", exchange)
}

// channel returns the live confirm-mode channel, opening one if needed.
// The caller holds p.sem.
func (p *Publisher) channel(ctx context.Context) (*pubChannel, error) {
	if pc := p.live.Load(); pc != nil && !pc.ended() && !pc.nacked.Load() {
		return pc, nil
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, ErrClosed
	}
	pc := p.cur
	p.mu.Unlock()
	if pc != nil && !pc.ended() {
		if !pc.nacked.Load() {
			return pc, nil
		}
		// A channel the broker keeps nacking on (see retireAfterNacks):
		// new publishes go to a fresh one, and this one closes once what is
		// in flight on it has its answer — closing it now would resend
		// those and make duplicates.
		p.mu.Lock()
		p.retired = append(slices.DeleteFunc(p.retired, (*pubChannel).ended), pc)
		p.mu.Unlock()
		pc.retire(p.b)
	}
	for {
		ch, st, err := p.b.channel(ctx)
		if err != nil {
			return nil, err
		}
		if err := p.b.bounded(ctx, func() error { return ch.Confirm(false) }, func() { _ = ch.Close() }); err != nil {
			if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
				return nil, fmt.Errorf("mq: put channel in confirm mode: %w", err)
			}
			p.b.closeLater(ch)
			if st.isLost() {
				continue
			}
			return nil, brokerError("put channel in confirm mode", err)
		}
		pc = &pubChannel{ch: ch, st: st, exchange: p.exchange, over: make(chan struct{}),
			reqs: make(chan *pubReq), wdone: make(chan struct{}), live: map[fingerprint]*amqp.DeferredConfirmation{}}
		// Two unbuffered return listeners: amqp091-go hands a return to
		// each in turn, so it cannot go on to the ack that follows before
		// the watcher took the second, which it does only once the first
		// is recorded.
		r1 := ch.NotifyReturn(make(chan amqp.Return))
		r2 := ch.NotifyReturn(make(chan amqp.Return))
		closes := ch.NotifyClose(make(chan *amqp.Error, 1))
		go pc.watch(closes, r1, r2)
		go pc.writer(p)
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			_ = ch.Close()
			<-pc.over
			<-pc.wdone
			return nil, ErrClosed
		}
		p.cur = pc
		p.live.Store(pc)
		p.mu.Unlock()
		return pc, nil
	}
}

// Close closes the publisher's channel. Publishes still waiting for a
// confirm fail with ErrClosed. Close is idempotent. On a socket that stopped
// draining it returns once the connection is declared dead (see
// Config.Heartbeat); Broker.Close bounds it by its own context.
func (p *Publisher) Close() { p.close(context.Background()) }

// close closes the publisher's channels, waiting for the broker's answer
// at most until ctx ends (the channels then end with the connection, which
// Broker.Close aborts).
func (p *Publisher) close(ctx context.Context) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	pc, retired := p.cur, p.retired
	p.live.Store(nil)
	p.mu.Unlock()
	shut := func(c *pubChannel) {
		_ = p.b.bounded(ctx, func() error {
			_ = c.ch.Close()
			<-c.over
			<-c.wdone
			return nil
		}, nil)
	}
	for _, r := range retired {
		if r != pc {
			shut(r)
		}
	}
	if pc != nil {
		shut(pc)
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
// sent again, all together, as with Publish.
func (p *Publisher) PublishBatch(ctx context.Context, routingKey string, msgs []Message) error {
	type hooked struct {
		info *Publishing
		hctx context.Context
	}
	hooks := p.b.hooks.publish
	flights := make([]flight, len(msgs))
	checked := make([]checkedPublish, len(msgs)) // what a resend sends again: the same id, timestamp and headers
	errs := make([]error, len(msgs))
	var hk []hooked
	if len(hooks) > 0 {
		hk = make([]hooked, len(msgs))
	}
	// First round: every message is prepared (hooks, validator), then
	// written in one go (one hand-over to the channel's writer for the
	// whole run, rather than one per message).
	pending := make([]int, 0, len(msgs))
	for i := range msgs {
		m := msgs[i]
		if len(hooks) > 0 {
			m.Headers = cloneHeaders(m.Headers)
			if m.Headers == nil {
				m.Headers = amqp.Table{}
			}
		}
		pub := m.publishing()
		if len(hooks) > 0 {
			info := &Publishing{Exchange: p.exchange, RoutingKey: routingKey, Mandatory: p.mandatory, Hop: p.hop, Message: &m, Server: p.server()}
			hctx := ctx
			for _, h := range hooks {
				hctx = h.OnPublish(hctx, info)
			}
			hk[i] = hooked{info, hctx}
			pub.Headers = m.Headers
		}
		cp, err := p.check(routingKey, pub, p.hop)
		if err != nil {
			errs[i] = err // this message only: the rest of the batch goes on
			continue
		}
		checked[i] = cp
		pending = append(pending, i)
	}
	var failed error
	for len(pending) > 0 {
		n, err := p.writeMany(ctx, routingKey, checked, pending, flights, errs)
		if err != nil {
			failed = err
			break
		}
		if n == 0 { // its fingerprint is in flight: write it alone, which waits
			i := pending[0]
			flights[i], err = p.write(ctx, routingKey, checked[i])
			switch {
			case errors.Is(err, ErrInvalid):
				errs[i] = err
			case err != nil:
				failed = err
			}
			if failed != nil {
				break
			}
			n = 1
		}
		pending = pending[n:]
	}
	for _, i := range pending {
		errs[i] = failed
	}
	for i := range errs { // written when its channel was dying: again, on its own
		if errs[i] == errResend {
			errs[i] = nil
			if failed == nil {
				flights[i], failed = p.write(ctx, routingKey, checked[i])
			}
			errs[i] = failed
		}
	}
	// Collect the confirms; those whose channel ended before the confirm go
	// round again, all together; those refused beside others, alone.
	var todo []int // nil: every message of the first round
	for first := true; first || len(todo) > 0; first = false {
		var again []int
		settle := func(i int) {
			if errs[i] != nil {
				return
			}
			err := flights[i].await(ctx)
			if err == errResend {
				again = append(again, i)
				return
			}
			if shared, ok := err.(*sharedRefusal); ok {
				err = p.solo(ctx, routingKey, checked[i], shared)
			}
			errs[i] = p.wrap(routingKey, err)
		}
		if first {
			for i := range msgs {
				settle(i)
			}
		} else {
			for _, i := range todo {
				settle(i)
			}
		}
		for _, i := range again {
			if failed == nil {
				flights[i], failed = p.write(ctx, routingKey, checked[i])
				if errors.Is(failed, ErrInvalid) {
					errs[i], failed = failed, nil
					continue
				}
			}
			if failed != nil {
				errs[i] = failed
			}
		}
		todo = again
	}
	for i := range hk {
		for j := len(hooks) - 1; j >= 0; j-- {
			hooks[j].OnPublishDone(hk[i].hctx, hk[i].info, errs[i])
		}
	}
	for _, err := range errs {
		if err != nil {
			return &BatchError{Errs: errs}
		}
	}
	return nil
}

// fingerprint identifies a mandatory publish to the basic.return that may
// come back for it: routing key and message id.
type fingerprint struct{ key, id string }

// returnable is a mandatory publish in flight: a basic.return may still
// come for it.
type returnable struct {
	fp        fingerprint
	dc        *amqp.DeferredConfirmation // set once sent
	returned  bool
	settled   bool // its publisher read the outcome (or it was never sent)
	abandoned bool // its publisher stopped waiting: drop it once its confirm came
}

// pubChannel is one channel of a publisher and its return bookkeeping.
// Confirms need none: each publish waits on its own deferred confirmation.
type pubChannel struct {
	ch       *amqp.Channel
	st       *conn
	exchange string
	over     chan struct{} // closed when the watcher saw the channel end

	reqs  chan *pubReq  // to the writer goroutine (see put)
	wdone chan struct{} // closed when the writer ended

	mu       sync.Mutex
	live     map[fingerprint]*amqp.DeferredConfirmation // the mandatory publish in flight for each fingerprint (nil: being sent)
	q        []returnable                               // mandatory publishes in flight, in the order sent; q[0] is number base
	arr      []returnable                               // q's array, from its start: reused, so a steady flow allocates nothing
	base     uint64
	closeErr *amqp.Error

	nacks    atomic.Int32 // nacks since the last ack
	nacked   atomic.Bool  // nacked retireAfterNacks times in a row: retire the channel
	inflight atomic.Int64 // sent, answer not yet read
	retiring atomic.Bool  // no new publishes: close when inflight reaches 0
	shut     sync.Once
	broker   *Broker
}

// retire closes pc once nothing is in flight on it.
func (pc *pubChannel) retire(b *Broker) {
	pc.broker = b
	pc.retiring.Store(true)
	if pc.inflight.Load() == 0 {
		pc.shutLater()
	}
}

// landed is called as each publish's answer is read.
func (pc *pubChannel) landed() {
	if pc.inflight.Add(-1) == 0 && pc.retiring.Load() {
		pc.shutLater()
	}
}

func (pc *pubChannel) shutLater() {
	pc.shut.Do(func() { pc.broker.closeLater(pc.ch) })
}

// retireAfterNacks is how many nacks in a row retire a publisher's channel.
// A channel can get stuck nacking (measured on RabbitMQ 3.10: a quorum
// queue whose leader died as the channel first published to it nacked
// every later publish on that channel, while a fresh channel got through);
// a single nack, from a queue that rejects publishes when full, is not
// worth a new channel.
const retireAfterNacks = 2

// add queues a mandatory publish about to be sent and returns its number,
// unless a publish with the same fingerprint is still in flight on the
// channel: then it returns that one's confirmation to wait for, and queues
// nothing. The broker returns a message by routing key and properties
// only, so two such publishes in flight at once could not be told apart.
func (pc *pubChannel) add(fp fingerprint) (uint64, *amqp.DeferredConfirmation) {
	seq, busy, _ := pc.tryAdd(fp)
	return seq, busy
}

// tryAdd is add that also reports a conflict with a publish queued in the
// same write and not sent yet (ok false, busy nil).
func (pc *pubChannel) tryAdd(fp fingerprint) (seq uint64, busy *amqp.DeferredConfirmation, ok bool) {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if dc, found := pc.live[fp]; found && (dc == nil || !isDone(dc)) {
		return 0, dc, false
	}
	if pc.live == nil {
		pc.live = map[fingerprint]*amqp.DeferredConfirmation{}
	}
	pc.live[fp] = nil
	if len(pc.q) == cap(pc.q) { // no room after the tail
		if cap(pc.arr) > 0 && len(pc.q) <= cap(pc.arr)/2 {
			n := copy(pc.arr, pc.q) // move to the front
			clear(pc.arr[n:])
			pc.q = pc.arr[:n]
		} else {
			pc.arr = make([]returnable, max(16, 2*len(pc.q)))
			n := copy(pc.arr, pc.q)
			pc.q = pc.arr[:n]
		}
	}
	pc.q = append(pc.q, returnable{fp: fp})
	return pc.base + uint64(len(pc.q)) - 1, nil, true
}

// sent records publish seq's deferred confirmation (nil: it was not sent).
func (pc *pubChannel) sent(seq uint64, dc *amqp.DeferredConfirmation) {
	pc.mu.Lock()
	r := &pc.q[seq-pc.base]
	r.dc = dc
	if dc != nil {
		pc.live[r.fp] = dc
	} else {
		delete(pc.live, r.fp)
	}
	pc.mu.Unlock()
}

// done reports whether publish seq was returned, now that its outcome is
// read, and lets the queue forget it.
func (pc *pubChannel) done(seq uint64) bool {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	r := &pc.q[seq-pc.base]
	r.settled = true
	if r.dc == nil && pc.live[r.fp] == nil {
		delete(pc.live, r.fp) // never sent
	}
	returned := r.returned
	pc.trimLocked()
	return returned
}

// abandon marks publish seq as no longer awaited (its context ended). It
// stays queued until its confirm came: a return may still come for it, and
// must not be taken for a later publish's.
func (pc *pubChannel) abandon(seq uint64) {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	pc.q[seq-pc.base].abandoned = true
	pc.trimLocked()
}

// trimLocked drops the settled publishes at the head of the queue.
func (pc *pubChannel) trimLocked() {
	n := 0
	for n < len(pc.q) {
		r := &pc.q[n]
		if !r.settled && !(r.abandoned && (r.dc == nil || isDone(r.dc))) {
			break
		}
		n++
	}
	if n == 0 {
		return
	}
	for i := range n {
		if r := &pc.q[i]; r.dc != nil && pc.live[r.fp] == r.dc {
			delete(pc.live, r.fp)
		}
	}
	clear(pc.q[:n]) // let go of the deferred confirmations
	pc.q = pc.q[n:]
	pc.base += uint64(n)
	if len(pc.q) == 0 {
		pc.q = pc.arr[:0]
	}
}

func isDone(dc *amqp.DeferredConfirmation) bool {
	select {
	case <-dc.Done():
		return true
	default:
		return false
	}
}

// onReturn marks the oldest publish in flight with the return's routing
// key and message id that was neither returned nor confirmed yet: the
// broker returns publishes in the order they were sent, and a publish's
// return comes before its ack, so one whose confirm came (its goroutine
// has yet to read it) is not the one. Every publish but the one being sent
// has its deferred confirmation recorded (write records it before the next
// publish).
func (pc *pubChannel) onReturn(r amqp.Return) {
	fp := fingerprint{r.RoutingKey, r.MessageId}
	pc.mu.Lock()
	defer pc.mu.Unlock()
	for i := range pc.q {
		e := &pc.q[i]
		if e.fp != fp || e.returned || e.settled || (e.dc != nil && isDone(e.dc)) {
			continue
		}
		e.returned = true
		return
	}
}

func (pc *pubChannel) ended() bool {
	select {
	case <-pc.over:
		return true
	default:
		return pc.ch.IsClosed()
	}
}

// waitDone waits for the channel's watcher to end; false if ctx ended
// first.
func (pc *pubChannel) waitDone(ctx context.Context) bool {
	select {
	case <-pc.over:
		return true
	case <-ctx.Done():
		return false
	}
}

// watch records returns and the channel's end. See Publisher.channel for
// the two return listeners.
func (pc *pubChannel) watch(closes chan *amqp.Error, r1, r2 chan amqp.Return) {
	defer close(pc.over)
	for {
		select {
		case r, ok := <-r1:
			if !ok {
				r1 = nil
				continue
			}
			pc.onReturn(r)
			<-r2
		case e, ok := <-closes:
			if !ok {
				return
			}
			pc.mu.Lock()
			pc.closeErr = e
			pc.mu.Unlock()
		}
	}
}

// endErr is what the channel's end means for a publish it did not
// confirm: a channel exception caused by the publishes (the exchange does
// not exist, say) is final; a lost connection or a closed channel means
// send again.
func (pc *pubChannel) endErr() error {
	pc.mu.Lock()
	e := pc.closeErr
	pc.mu.Unlock()
	if e == nil || !channelLevel(e) || pc.st.isLost() {
		return errResend
	}
	return &sharedRefusal{brokerError(publishOp(pc.exchange), e)}
}
