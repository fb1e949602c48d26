package mq

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

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

	sem     chan struct{}              // one writer at a time: sequence numbers and sends stay in step
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
	if err := pub.Headers.Validate(); err != nil {
		return fmt.Errorf("mq: publish to %s: %w", p.dest(key), err)
	}
	for {
		f, err := p.write(ctx, key, pub)
		if err != nil {
			return err
		}
		if err := f.await(ctx); err != errResend {
			return p.wrap(key, err)
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

// flight is one publish sent and not yet settled.
type flight struct {
	pc        *pubChannel
	dc        *amqp.DeferredConfirmation
	seq       uint64 // mandatory publishes: its place in pc's queue of returnable publishes
	mandatory bool
}

// write sends one publish on the current channel (opening one if needed).
// The headers were validated before, so a failed send means the channel or
// its connection broke: the publish goes out again on the next one.
func (p *Publisher) write(ctx context.Context, key string, pub amqp.Publishing) (flight, error) {
	for {
		select {
		case p.sem <- struct{}{}:
		case <-ctx.Done():
			// Another publish holds the channel, most likely waiting out a
			// resource alarm: say so rather than only "deadline exceeded".
			return flight{}, p.b.stateNow().blockedErr(fmt.Errorf("mq: publish to %s: %w", p.dest(key), ctx.Err()))
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
		var seq uint64
		if p.mandatory {
			seq = pc.add(fingerprint{key, pub.MessageId})
		}
		dc, err := pc.ch.PublishWithDeferredConfirm(p.exchange, key, p.mandatory, false, pub)
		if p.mandatory {
			pc.sent(seq, dc) // before the next publish: see onReturn
		}
		<-p.sem
		if err == nil && dc != nil {
			pc.inflight.Add(1)
			return flight{pc: pc, dc: dc, seq: seq, mandatory: p.mandatory}, nil
		}
		if p.mandatory {
			pc.done(seq) // never sent
		}
		if err == nil { // cannot happen: the channel is in confirm mode
			return flight{}, fmt.Errorf("mq: publish to %s: the channel is not in confirm mode", p.dest(key))
		}
		// The channel died under us, or its connection did (a write error
		// comes before the reader notices the loss). Wait for the channel's
		// end, then try on a fresh one: the connection may be coming back.
		if !pc.waitDone(ctx) {
			return flight{}, fmt.Errorf("mq: publish to %s: %w (after %v)", p.dest(key), ctx.Err(), err)
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
	// exchange does not exist) is final; a lost connection or a closed
	// channel means send again.
	if !f.pc.waitDone(ctx) {
		return fmt.Errorf("no confirm yet: %w", ctx.Err())
	}
	return f.pc.endErr()
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
		pc = &pubChannel{ch: ch, st: st, exchange: p.exchange, over: make(chan struct{})}
		// Two unbuffered return listeners: amqp091-go hands a return to
		// each in turn, so it cannot go on to the ack that follows before
		// the watcher took the second, which it does only once the first
		// is recorded.
		r1 := ch.NotifyReturn(make(chan amqp.Return))
		r2 := ch.NotifyReturn(make(chan amqp.Return))
		closes := ch.NotifyClose(make(chan *amqp.Error, 1))
		go pc.watch(closes, r1, r2)
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			_ = ch.Close()
			<-pc.over
			return nil, ErrClosed
		}
		p.cur = pc
		p.live.Store(pc)
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
	pc, retired := p.cur, p.retired
	p.live.Store(nil)
	p.mu.Unlock()
	for _, r := range retired {
		if r != pc {
			_ = r.ch.Close()
			<-r.over
		}
	}
	if pc != nil {
		_ = pc.ch.Close()
		<-pc.over
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
	// What a resend needs besides msgs[i]: the defaults its first send got
	// (the same message id and timestamp again) and the headers hooks left.
	type slot struct {
		f       flight
		id      string
		ts      time.Time
		headers amqp.Table
	}
	type hooked struct {
		info *Publishing
		hctx context.Context
	}
	hooks := p.b.hooks.publish
	slots := make([]slot, len(msgs))
	errs := make([]error, len(msgs))
	var hk []hooked
	if len(hooks) > 0 {
		hk = make([]hooked, len(msgs))
	}
	// First round: each message is written as soon as it is ready, so the
	// broker starts on the batch while the rest is prepared.
	var failed error
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
		s := &slots[i]
		s.id, s.ts, s.headers = pub.MessageId, pub.Timestamp, pub.Headers
		if err := pub.Headers.Validate(); err != nil {
			errs[i] = fmt.Errorf("mq: publish to %s: %w", p.dest(routingKey), err)
			continue
		}
		if failed == nil {
			s.f, failed = p.write(ctx, routingKey, pub)
		}
		if failed != nil {
			errs[i] = failed
		}
	}
	// Collect the confirms; those whose channel ended before the confirm go
	// round again, all together.
	var todo []int // nil: every message of the first round
	for first := true; first || len(todo) > 0; first = false {
		var again []int
		settle := func(i int) {
			if errs[i] != nil {
				return
			}
			err := slots[i].f.await(ctx)
			if err == errResend {
				again = append(again, i)
				return
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
				s := &slots[i]
				m := msgs[i]
				m.MessageId, m.Timestamp, m.Headers = s.id, s.ts, s.headers
				s.f, failed = p.write(ctx, routingKey, m.publishing())
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

	mu       sync.Mutex
	q        []returnable // mandatory publishes in flight, in the order sent; q[0] is number base
	arr      []returnable // q's array, from its start: reused, so a steady flow allocates nothing
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

// add queues a mandatory publish about to be sent and returns its number.
func (pc *pubChannel) add(fp fingerprint) uint64 {
	pc.mu.Lock()
	defer pc.mu.Unlock()
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
	return pc.base + uint64(len(pc.q)) - 1
}

// sent records publish seq's deferred confirmation (nil: it was not sent).
func (pc *pubChannel) sent(seq uint64, dc *amqp.DeferredConfirmation) {
	pc.mu.Lock()
	pc.q[seq-pc.base].dc = dc
	pc.mu.Unlock()
}

// done reports whether publish seq was returned, now that its outcome is
// read, and lets the queue forget it.
func (pc *pubChannel) done(seq uint64) bool {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	r := &pc.q[seq-pc.base]
	r.settled = true
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
	op := fmt.Sprintf("publish to exchange %q", pc.exchange)
	if pc.exchange == "" {
		op = "publish to the default exchange"
	}
	return brokerError(op, e)
}
