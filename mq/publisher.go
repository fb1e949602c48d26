package mq

import (
	"context"
	"errors"
	"fmt"
	"runtime"
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

	sem   chan struct{} // one caller at a time opens a channel (see open)
	solos chan struct{} // publishes resent alone after a refusal beside them (see solo)
	// live is the channel publishes go to (nil before the first, while a
	// retired one is replaced, and after Close): stored under mu, read
	// without it on every publish.
	live    atomic.Pointer[pubChannel]
	mu      sync.Mutex
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
	if len(p.b.hooks.publish) > 0 {
		return p.publishHooked(ctx, key, m, hop)
	}
	cp, err := p.check(key, m.publishing(), hop)
	if err != nil {
		return err
	}
	return p.send(ctx, key, &cp)
}

// publishHooked is publish with hooks to call. Apart, so that the message
// of a publish without hooks stays on the caller's stack.
func (p *Publisher) publishHooked(ctx context.Context, key string, m Message, hop HopKind) error {
	pub, info, hctx := p.startHooks(ctx, key, m, hop)
	cp, err := p.check(key, pub, hop)
	if err == nil {
		err = p.send(ctx, key, &cp)
	}
	p.endHooks(hctx, info, err)
	return err
}

// startHooks shows m to every publish hook's OnPublish, in order, and
// returns what to send (with the headers the hooks wrote), what the hooks
// were shown and the context for endHooks. m's headers are copied first,
// so a hook's writes never reach the caller's table, and its defaults are
// applied first, so hooks see the message id.
func (p *Publisher) startHooks(ctx context.Context, key string, m Message, hop HopKind) (amqp.Publishing, *Publishing, context.Context) {
	m.Headers = cloneHeaders(m.Headers)
	if m.Headers == nil {
		m.Headers = amqp.Table{}
	}
	pub := m.publishing()
	info := &Publishing{Exchange: p.exchange, RoutingKey: key, Mandatory: p.mandatory, Hop: hop, Message: &m, Server: p.server()}
	for _, h := range p.b.hooks.publish {
		ctx = h.OnPublish(ctx, info)
	}
	pub.Headers = m.Headers
	return pub, info, ctx
}

// endHooks tells every publish hook, in reverse order, how the publish
// startHooks began ended.
func (p *Publisher) endHooks(hctx context.Context, info *Publishing, err error) {
	for i := len(p.b.hooks.publish) - 1; i >= 0; i-- {
		p.b.hooks.publish[i].OnPublishDone(hctx, info, err)
	}
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
	if pc := p.live.Load(); pc != nil {
		return pc.st.server
	}
	if st := p.b.stateNow(); st != nil {
		return st.server
	}
	return ""
}

// send writes a validated publish and waits for its confirm, resending
// after a lost connection until ctx ends, and alone after a refusal that
// may have been another publish's.
func (p *Publisher) send(ctx context.Context, key string, cp *checkedPublish) error {
	for {
		r, err := p.write(ctx, key, cp)
		if err != nil {
			return err
		}
		err = p.outcome(ctx, key, r)
		if err == errResend {
			continue
		}
		if shared, ok := err.(*sharedRefusal); ok {
			return p.wrap(key, p.solo(ctx, key, *cp, shared))
		}
		return err
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

// States of a pubReq. Its caller and pc's writer each move it on with a
// compare-and-swap, so exactly one of them decides whether it is sent.
const (
	reqQueued  int32 = iota // waiting in pc.wq
	reqTaken                // the writer is writing it
	reqWritten              // written: dc or err is set
	reqGaveUp               // its caller left before the writer took it: never sent
	reqLeft                 // its caller left while the writer wrote it: the writer settles it
)

// pubReq is one publish queued on a channel for its writer goroutine.
// Its caller parks once, on done, which is signalled (once) when the
// publish is settled (confirmed, nacked, or its channel ended: dc is done,
// or about to be when the channel ended) or its write failed (err). A
// caller that received from done returns the pubReq to reqPool for the next
// publish; one that left (its ctx ended) leaves it to the collector.
type pubReq struct {
	pc    *pubChannel
	key   string
	pub   amqp.Publishing
	seq   uint64 // mandatory: its place in pc's queue of returnable publishes
	state atomic.Int32
	dc    *amqp.DeferredConfirmation // set by the writer before reqWritten
	err   error                      // likewise
	done  chan struct{}              // buffered: the one signal never blocks
}

// reqPool recycles the pubReqs (and their done channels) of settled
// publishes.
var reqPool = sync.Pool{New: func() any { return &pubReq{done: make(chan struct{}, 1)} }}

func newReq(pc *pubChannel, key string, pub *amqp.Publishing) *pubReq {
	r := reqPool.Get().(*pubReq)
	r.pc, r.key, r.pub = pc, key, *pub
	return r
}

// recycle returns r to reqPool; only its caller, after receiving from done.
func (r *pubReq) recycle() {
	r.pc, r.key, r.pub, r.seq, r.dc, r.err = nil, "", amqp.Publishing{}, 0, nil, nil
	r.state.Store(reqQueued)
	reqPool.Put(r)
}

// signal wakes r's caller; once per pubReq.
func (r *pubReq) signal() { r.done <- struct{}{} }

// write queues one validated publish on the current channel (opening one
// if needed, waiting out a blocked connection). A ctx that has ended
// queues nothing.
func (p *Publisher) write(ctx context.Context, key string, cp *checkedPublish) (*pubReq, error) {
	for {
		pc, err := p.ready(ctx, key)
		if err != nil {
			return nil, err
		}
		if err := cp.fitsFrame(pc.st.frameMax()); err != nil {
			return nil, fmt.Errorf("mq: publish to %s: %w", p.dest(key), err)
		}
		r := newReq(pc, key, &cp.pub)
		busy, wrote, ok := pc.enqueue(r, p.mandatory)
		if ok {
			return r, nil
		}
		switch {
		case busy != nil || wrote != nil:
			// A publish with the same routing key and message id is in
			// flight (or queued): a return could not be told apart. Wait
			// for its confirm (or its write), then go again.
			var err error
			if busy != nil {
				err = waitConfirm(ctx, busy, pc)
			} else {
				err = waitClosed(ctx, wrote, pc)
			}
			if err != nil {
				return nil, fmt.Errorf("mq: publish to %s: %w (nothing was sent: waiting for a publish with the same message id)", p.dest(key), err)
			}
		case !pc.waitDone(ctx): // the channel's writer ended: go again once the channel has
			return nil, fmt.Errorf("mq: publish to %s: %w (nothing was sent)", p.dest(key), ctx.Err())
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

// waitConfirm waits for dc (nil: none to wait for), the end of pc, or ctx.
func waitConfirm(ctx context.Context, dc *amqp.DeferredConfirmation, pc *pubChannel) error {
	if dc == nil {
		return ctx.Err()
	}
	return waitClosed(ctx, dc.Done(), pc)
}

// waitClosed waits for c to close, the end of pc, or ctx.
func waitClosed(ctx context.Context, c <-chan struct{}, pc *pubChannel) error {
	select {
	case <-c:
	case <-pc.over:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// outcome waits for a queued publish to be settled and says what became
// of it: nil, a final error (wrapped), errResend when it must be written
// again, or a *sharedRefusal.
func (p *Publisher) outcome(ctx context.Context, key string, r *pubReq) error {
	pc := r.pc
	got := true
	select {
	case <-r.done:
	case <-ctx.Done():
		select {
		case <-r.done: // settled already: that wins over an ended ctx
		default:
			if err := p.leave(ctx, key, r); err != nil {
				return err
			}
			got = false // written: its outcome is read below, an ended ctx included
		}
	}
	dc, werr, seq := r.dc, r.err, r.seq
	if got {
		r.recycle()
	}
	if werr != nil || dc == nil {
		if p.mandatory {
			pc.done(seq) // never sent
		}
		if werr == nil { // cannot happen: the channel is in confirm mode
			return fmt.Errorf("mq: publish to %s: the channel is not in confirm mode", p.dest(key))
		}
		if !pc.ended() && !pc.st.isLost() && isCallerError(werr) {
			// amqp091-go refused to write it; the connection is intact.
			return fmt.Errorf("mq: publish to %s: %w: %w", p.dest(key), ErrInvalid, werr)
		}
		// The channel died under us, or its connection did (a write error
		// comes before the reader notices the loss). Wait for the channel's
		// end, then try on a fresh one: the connection may be coming back.
		if !pc.waitDone(ctx) {
			return fmt.Errorf("mq: publish to %s: %w (after %v)", p.dest(key), ctx.Err(), werr)
		}
		return errResend
	}
	err := flight{pc: pc, dc: dc, seq: seq, mandatory: p.mandatory}.await(ctx)
	if err == errResend {
		return err
	}
	if _, ok := err.(*sharedRefusal); ok {
		return err
	}
	return p.wrap(key, err)
}

// leave gives up waiting for r as ctx ended, and returns the error that
// says how far it got; nil when the writer had written it already (r.dc
// or r.err is set: the caller reads the outcome, an ended ctx included).
func (p *Publisher) leave(ctx context.Context, key string, r *pubReq) error {
	pc := r.pc
	switch {
	case r.state.CompareAndSwap(reqQueued, reqGaveUp):
		// The writer skips it now, never reading it: let go of the body
		// rather than hold it in the queue (behind a stalled socket, say).
		r.pub = amqp.Publishing{}
		if p.mandatory {
			pc.done(r.seq) // never sent
		}
		return pc.st.blockedErr(fmt.Errorf("mq: publish to %s: %w (nothing was sent)", p.dest(key), ctx.Err()))
	case r.state.CompareAndSwap(reqTaken, reqLeft):
		return pc.st.blockedErr(errAbandoned(p.dest(key), ctx.Err()))
	}
	return nil
}

// writeMany queues the publishes at idx of cps (a batch's, all to key) in
// one go on the current channel, as far as it can without two equal
// fingerprints in flight, and fills reqs for those it queued and errs for
// those that cannot be sent. It returns how many of idx it handled: 0
// means the first must go through write (it waits for a publish with its
// fingerprint); err is the whole write's failure.
func (p *Publisher) writeMany(ctx context.Context, key string, cps []checkedPublish, idx []int, reqs []*pubReq, errs []error) (int, error) {
	for {
		pc, err := p.ready(ctx, key)
		if err != nil {
			return 0, err
		}
		frameMax := pc.st.frameMax()
		rs := make([]*pubReq, 0, len(idx))
		at := make([]int, 0, len(idx)) // where in idx each of rs is
		for k, i := range idx {
			if err := cps[i].fitsFrame(frameMax); err != nil {
				errs[i] = fmt.Errorf("mq: publish to %s: %w", p.dest(key), err)
				continue
			}
			rs = append(rs, newReq(pc, key, &cps[i].pub))
			at = append(at, k)
		}
		if len(rs) == 0 {
			return len(idx), nil
		}
		n := pc.enqueueRun(rs, p.mandatory)
		if n < 0 { // the channel's writer ended: go again once the channel has
			if !pc.waitDone(ctx) {
				return 0, fmt.Errorf("mq: publish to %s: %w (nothing was sent)", p.dest(key), ctx.Err())
			}
			continue
		}
		for k, r := range rs[:n] {
			reqs[idx[at[k]]] = r
		}
		if n == len(rs) {
			return len(idx), nil
		}
		return at[n], nil
	}
}

func errAbandoned(dest string, err error) error {
	return fmt.Errorf("mq: publish to %s: %w (the write to the socket had not finished: the message may or may not reach the broker)", dest, err)
}

// isCallerError reports an error amqp091-go returns before writing
// anything (the validator is meant to catch these first).
func isCallerError(err error) bool {
	return errors.Is(err, amqp.ErrFieldType)
}

// enqueue queues r for pc's writer, numbering it among the returnable
// publishes when mandatory, in the order it will be sent. Not queued: busy
// is the confirmation of a publish in flight with r's fingerprint, or
// wrote closes once the writer wrote its run (one with r's fingerprint is
// queued, not sent yet); both nil means the writer ended.
func (pc *pubChannel) enqueue(r *pubReq, mandatory bool) (busy *amqp.DeferredConfirmation, wrote chan struct{}, ok bool) {
	pc.mu.Lock()
	if pc.wclosed {
		pc.mu.Unlock()
		return nil, nil, false
	}
	if mandatory {
		seq, busy, ok := pc.tryAddLocked(fingerprint{r.key, r.pub.MessageId})
		if !ok {
			if busy == nil {
				wrote = pc.wroteLocked()
			}
			pc.mu.Unlock()
			return busy, wrote, false
		}
		r.seq = seq
	}
	pc.wq = append(pc.wq, r)
	pc.mu.Unlock()
	kick(pc.wkick)
	return nil, nil, true
}

// enqueueRun queues a batch's run of publishes (rs, in order) as far as it
// can without two equal fingerprints in flight, and returns how many it
// queued; -1 when the writer ended.
func (pc *pubChannel) enqueueRun(rs []*pubReq, mandatory bool) int {
	pc.mu.Lock()
	if pc.wclosed {
		pc.mu.Unlock()
		return -1
	}
	n := 0
	for _, r := range rs {
		if mandatory {
			seq, _, ok := pc.tryAddLocked(fingerprint{r.key, r.pub.MessageId})
			if !ok {
				break
			}
			r.seq = seq
		}
		pc.wq = append(pc.wq, r)
		n++
	}
	pc.mu.Unlock()
	if n > 0 {
		kick(pc.wkick)
	}
	return n
}

// wroteLocked returns a channel closed once the writer wrote its current
// run, or a never-sent publish left the queue; pc.mu is held.
func (pc *pubChannel) wroteLocked() chan struct{} {
	if pc.wrote == nil {
		pc.wrote = make(chan struct{})
	}
	return pc.wrote
}

// wakeWroteLocked wakes the publishes waiting for a fingerprint to be
// sent or dropped; pc.mu is held.
func (pc *pubChannel) wakeWroteLocked() {
	if pc.wrote != nil {
		close(pc.wrote)
		pc.wrote = nil
	}
}

func kick(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// writer writes the queued publishes, everything queued at once, until
// the channel ends; then it fails what is still queued, and queues no
// more. Writing on a goroutine of the channel's own keeps every caller
// bounded by its ctx even when the socket stopped draining: the write then
// finishes or fails later, and its outcome is nobody's.
func (pc *pubChannel) writer(mandatory bool) {
	defer close(pc.wdone)
	var run []*pubReq
	var sent []*pubReq
	for {
		select {
		case <-pc.wkick:
		case <-pc.over:
			pc.mu.Lock()
			pc.wclosed = true
			run, pc.wq = pc.wq, nil
			pc.wakeWroteLocked()
			pc.mu.Unlock()
			for _, r := range run {
				if r.state.CompareAndSwap(reqQueued, reqTaken) {
					pc.wrote1(r, nil, amqp.ErrClosed, mandatory)
				}
			}
			return
		}
		yielded := false
		for {
			pc.mu.Lock()
			run, pc.wq = pc.wq, run[:0]
			pc.mu.Unlock()
			if len(run) == 0 {
				if yielded {
					break
				}
				// Let the publishers that are runnable (woken by their
				// confirms, say) queue their next publish first: one
				// yield is cheaper than parking and being woken for a
				// run of one or two.
				yielded = true
				runtime.Gosched()
				continue
			}
			yielded = false
			sent = pc.writeRun(run, sent[:0], mandatory)
			clear(run)
			pc.settleLater(sent)
			clear(sent)
			pc.mu.Lock()
			pc.wakeWroteLocked()
			pc.mu.Unlock()
		}
	}
}

// writeRun writes run in one go (one write to the socket for the whole
// run, see socket.cork) and returns, appended to sent, the publishes it
// wrote, for the settler.
func (pc *pubChannel) writeRun(run, sent []*pubReq, mandatory bool) []*pubReq {
	pc.st.netc.cork()
	for _, r := range run {
		if !r.state.CompareAndSwap(reqQueued, reqTaken) {
			continue // its caller gave up first: never sent
		}
		dc, err := pc.ch.PublishWithDeferredConfirm(pc.exchange, r.key, mandatory, false, r.pub)
		if mandatory {
			pc.sent(r.seq, dc) // before the next publish: see onReturn
		}
		if pc.wrote1(r, dc, err, mandatory) {
			sent = append(sent, r)
		}
	}
	pc.st.netc.uncork()
	return sent
}

// wrote1 records the write of r and reports whether it went out (the
// settler then signals r.done at its confirm); otherwise r.done is signalled
// now. A publish whose caller left mid-write is settled here.
func (pc *pubChannel) wrote1(r *pubReq, dc *amqp.DeferredConfirmation, err error, mandatory bool) bool {
	ok := err == nil && dc != nil
	if ok {
		pc.inflight.Add(1)
	}
	r.dc, r.err = dc, err
	if !r.state.CompareAndSwap(reqTaken, reqWritten) { // its caller left mid-write
		switch {
		case ok:
			if mandatory {
				pc.abandon(r.seq)
			}
			pc.landed()
		case mandatory:
			pc.done(r.seq)
		}
	}
	if !ok {
		r.signal()
	}
	return ok
}

// settleLater hands written publishes to the settler.
func (pc *pubChannel) settleLater(rs []*pubReq) {
	if len(rs) == 0 {
		return
	}
	pc.smu.Lock()
	pc.sq = append(pc.sq, rs...)
	pc.smu.Unlock()
	kick(pc.skick)
}

// settler wakes each publish's caller once its confirmation is done, in
// the order they were written: it waits on the oldest and then wakes every
// one settled by then (a multiple ack settles many at once), so a caller
// parks once per publish and the settler once per run of confirms. When
// the channel ends it wakes every caller at once (their confirmations are
// settled as the channel's end reaches amqp091-go's bookkeeping; each
// caller waits for its own then). It ends after the writer, with nothing
// left to settle.
func (pc *pubChannel) settler() {
	defer close(pc.sdone)
	var wake []*pubReq
	over := false
	for {
		pc.smu.Lock()
		if len(pc.sq) == 0 {
			pc.smu.Unlock()
			select {
			case <-pc.skick:
			case <-pc.wdone:
				pc.smu.Lock()
				n := len(pc.sq)
				pc.smu.Unlock()
				if n == 0 {
					return
				}
			}
			continue
		}
		head := pc.sq[0].dc
		pc.smu.Unlock()
		if !over {
			select {
			case <-head.Done():
			case <-pc.over:
				over = true
			}
		}
		pc.smu.Lock()
		n := 0
		for n < len(pc.sq) && (over || isDone(pc.sq[n].dc)) {
			n++
		}
		wake = append(wake[:0], pc.sq[:n]...)
		m := copy(pc.sq, pc.sq[n:])
		clear(pc.sq[m:])
		pc.sq = pc.sq[:m]
		pc.smu.Unlock()
		for _, r := range wake {
			r.signal()
		}
		clear(wake)
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

func publishOp(exchange string) string {
	if exchange == "" {
		return "publish to the default exchange"
	}
	return fmt.Sprintf("publish to exchange %q", exchange)
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
		wkick: make(chan struct{}, 1), wdone: make(chan struct{}), skick: make(chan struct{}, 1), sdone: make(chan struct{}),
		live: map[fingerprint]uint64{}}
	// Two unbuffered return listeners: amqp091-go hands a return to
	// each in turn, so it cannot go on to the ack that follows before
	// the watcher took the second, which it does only once the first
	// is recorded.
	r1 := ch.NotifyReturn(make(chan amqp.Return))
	r2 := ch.NotifyReturn(make(chan amqp.Return))
	closes := ch.NotifyClose(make(chan *amqp.Error, 1))
	go pc.watch(closes, r1, r2)
	go pc.writer(p.mandatory)
	go pc.settler()
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		_ = ch.Close()
		<-pc.over
		<-pc.wdone
		<-pc.sdone
		return nil, ErrClosed
	}
	p.live.Store(pc)
	p.mu.Unlock()
	return pc, nil
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
	pc, retired := p.live.Swap(nil), p.retired
	p.mu.Unlock()
	shut := func(c *pubChannel) {
		_ = p.b.bounded(ctx, func() error {
			_ = c.ch.Close()
			<-c.over
			<-c.wdone
			<-c.sdone
			return nil
		}, nil)
	}
	for _, r := range retired {
		shut(r)
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
	checked := make([]checkedPublish, len(msgs)) // what a resend sends again: the same id, timestamp and headers
	errs := make([]error, len(msgs))
	var hk []hooked
	if len(p.b.hooks.publish) > 0 {
		hk = make([]hooked, len(msgs))
	}
	// Every message is prepared first (hooks, validator).
	pending := make([]int, 0, len(msgs))
	for i := range msgs {
		var pub amqp.Publishing
		if hk != nil {
			pub, hk[i].info, hk[i].hctx = p.startHooks(ctx, routingKey, msgs[i], p.hop)
		} else {
			m := msgs[i] // the defaults are the copy's: the caller's slice is left as it is
			pub = m.publishing()
		}
		cp, err := p.check(routingKey, pub, p.hop)
		if err != nil {
			errs[i] = err // this message only: the rest of the batch goes on
			continue
		}
		checked[i] = cp
		pending = append(pending, i)
	}
	// Each round writes every pending message in one go (one hand-over to
	// the channel's writer for the whole run, rather than one per message),
	// then collects their confirms; those whose channel ended before the
	// confirm go round again, all together; those refused beside others
	// are sent again alone.
	var failed error
	reqs := make([]*pubReq, len(msgs))
	for len(pending) > 0 && failed == nil {
	queue:
		for rest := pending; len(rest) > 0; {
			n, err := p.writeMany(ctx, routingKey, checked, rest, reqs, errs)
			if err != nil {
				failed = err
				break
			}
			if n == 0 { // its fingerprint is in flight: write it alone, which waits
				i := rest[0]
				reqs[i], err = p.write(ctx, routingKey, &checked[i])
				switch {
				case errors.Is(err, ErrInvalid):
					errs[i] = err
				case err != nil:
					failed = err
					break queue
				}
				n = 1
			}
			rest = rest[n:]
		}
		var again []int
		for _, i := range pending {
			r := reqs[i]
			if r == nil { // not queued: invalid, or the write failed
				if errs[i] == nil {
					errs[i] = failed
				}
				continue
			}
			reqs[i] = nil
			err := p.outcome(ctx, routingKey, r)
			if err == errResend {
				again = append(again, i)
				continue
			}
			if shared, ok := err.(*sharedRefusal); ok {
				err = p.wrap(routingKey, p.solo(ctx, routingKey, checked[i], shared))
			}
			errs[i] = err
		}
		pending = again
	}
	for _, i := range pending {
		errs[i] = failed
	}
	for i := range hk {
		p.endHooks(hk[i].hctx, hk[i].info, errs[i])
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
	fp         fingerprint
	dc         *amqp.DeferredConfirmation // set once sent
	returned   bool
	settled    bool // its publisher read the outcome (or it was never sent)
	abandoned  bool // its publisher stopped waiting: drop it once its confirm came
	superseded bool // confirmed, and a later publish with fp holds live[fp] now
}

// pubChannel is one channel of a publisher: its writer and settler
// goroutines and its return bookkeeping. Confirms need none: each publish
// is settled by its own deferred confirmation.
type pubChannel struct {
	ch       *amqp.Channel
	st       *conn
	exchange string
	over     chan struct{} // closed when the watcher saw the channel end

	wkick chan struct{} // something was queued (see writer)
	wdone chan struct{} // closed when the writer ended
	skick chan struct{} // something was written (see settler)
	sdone chan struct{} // closed when the settler ended

	smu sync.Mutex
	sq  []*pubReq // written, their callers not yet woken, in the order written

	mu       sync.Mutex
	wq       []*pubReq              // queued for the writer, in the order numbered
	wclosed  bool                   // the writer ended: nothing more is queued
	wrote    chan struct{}          // closed after the writer's current run (see wroteLocked)
	live     map[fingerprint]uint64 // the number of the mandatory publish in flight for each fingerprint (in q)
	q        []returnable           // mandatory publishes in flight, in the order sent; q[0] is number base
	arr      []returnable           // q's array, from its start: reused, so a steady flow allocates nothing
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

// tryAddLocked numbers a mandatory publish about to be queued for
// sending (ok), unless a publish with the same fingerprint is still on the
// channel: then it returns that one's confirmation to wait for when it is
// in flight, nil when it is queued and not sent yet, and numbers nothing.
// The broker returns a message by routing key and properties only, so two
// such publishes in flight at once could not be told apart. pc.mu is held
// (enqueue and enqueueRun hold it already).
// The map holds numbers, not confirmations, so that a publish costs it
// three look-ups (here, and the delete when the queue forgets it) whatever
// happens in between.
func (pc *pubChannel) tryAddLocked(fp fingerprint) (seq uint64, busy *amqp.DeferredConfirmation, ok bool) {
	if old, found := pc.live[fp]; found && old >= pc.base {
		e := &pc.q[old-pc.base]
		if e.dc == nil || !isDone(e.dc) { // being sent, or in flight
			return 0, e.dc, false
		}
		e.superseded = true // confirmed; its caller has yet to read it
	}
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
	seq = pc.base + uint64(len(pc.q)) - 1
	pc.live[fp] = seq
	return seq, nil, true
}

// sent records publish seq's deferred confirmation (nil: it was not sent).
func (pc *pubChannel) sent(seq uint64, dc *amqp.DeferredConfirmation) {
	pc.mu.Lock()
	r := &pc.q[seq-pc.base]
	r.dc = dc
	if dc == nil {
		delete(pc.live, r.fp) // never sent: never superseded either
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
	if r.dc == nil { // never sent: free its fingerprint, unless sent already freed it for another
		if cur, ok := pc.live[r.fp]; ok && cur == seq {
			delete(pc.live, r.fp)
		}
		pc.wakeWroteLocked() // a publish with its fingerprint may wait for it
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
		if r := &pc.q[i]; r.dc != nil && !r.superseded {
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
