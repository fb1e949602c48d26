package mq

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	amqp "github.com/rabbitmq/amqp091-go"
)

// PublisherOption configures a [Publisher].
type PublisherOption interface{ applyPublisher(*Publisher) }

type publisherOption func(*Publisher)

func (f publisherOption) applyPublisher(p *Publisher) { f(p) }

// Mandatory asks the broker to return a publish no queue is bound for; the
// publish then fails with [ErrUnroutable]. It is the default for every
// publisher (so a nil from Publish means some queue holds the message);
// the option remains to say so explicitly, and undoes [AllowUnroutable].
func Mandatory() PublisherOption {
	return publisherOption(func(p *Publisher) { p.mandatory = true })
}

// AllowUnroutable makes the publisher's publishes fire-and-forget as far as
// routing goes: a message no queue is bound for is confirmed and dropped by
// the broker, and Publish returns nil for it. For events that may have no
// audience (a topic nobody subscribes to yet). Off by default: without it a
// publish no queue is bound for fails with [ErrUnroutable]. The library's own
// hops are always mandatory.
func AllowUnroutable() PublisherOption {
	return publisherOption(func(p *Publisher) {
		if p.hop == "" {
			p.mandatory = false
		}
	})
}

// AsHop marks every publish of the publisher as a hop of the given kind for
// the hooks (a replay tool publishes with AsHop([OutcomeReplay])). It implies
// [Mandatory].
func AsHop(kind Outcome) PublisherOption {
	return publisherOption(func(p *Publisher) { p.hop, p.mandatory = kind, true })
}

// Publisher publishes to one exchange on a channel of its own, in confirm
// mode, mandatory unless [AllowUnroutable] was given. Publish returns nil
// once the broker has confirmed the message and routed it to at least one
// queue. It is safe for many goroutines at once, and pipelined: concurrent
// publishes share the channel's confirm stream without waiting for each
// other (two mandatory publishes with the same routing key and message id
// wait for each other, so a basic.return is credited to exactly the
// publish that caused it).
//
// Every publish is validated before it reaches the wire (see [ErrInvalid]):
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
	hop       Outcome

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
// use. Close it when done ([Broker.Close] closes the ones still open).
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

// Publish sends m to the publisher's exchange with routingKey and returns
// once the broker confirmed it. Errors: [ErrInvalid] when m (or the routing
// key) cannot be carried by the wire — nothing was sent; [ErrNacked] when the
// broker refused it; [ErrUnroutable] when no queue was bound for it (see
// [AllowUnroutable]); ctx's error when ctx ended first (the message may or
// may not have been taken; when ctx had ended before the call, nothing was
// sent); [ErrClosed]; or a *[BrokerError] (say, the exchange does not exist).
// While the broker blocks publishing (a resource alarm), Publish waits,
// bounded by ctx. Publish returns by ctx's deadline even when the socket
// under it stopped draining: the write then finishes or fails in the
// background, and the Publisher carries on once the connection is replaced.
func (p *Publisher) Publish(ctx context.Context, routingKey string, m Message) error {
	return p.publish(ctx, routingKey, m, p.hop)
}

func (p *Publisher) publish(ctx context.Context, key string, m Message, hop Outcome) error {
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
func (p *Publisher) publishHooked(ctx context.Context, key string, m Message, hop Outcome) error {
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
func (p *Publisher) startHooks(ctx context.Context, key string, m Message, hop Outcome) (amqp.Publishing, *PublishInfo, context.Context) {
	m.Headers = cloneHeaders(m.Headers)
	if m.Headers == nil {
		m.Headers = amqp.Table{}
	}
	pub := m.publishing()
	info := &PublishInfo{Exchange: p.exchange, RoutingKey: key, Mandatory: p.mandatory, Hop: hop, Message: &m, Server: p.server()}
	for _, h := range p.b.hooks.publish {
		ctx = h.OnPublish(ctx, info)
	}
	pub.Headers = m.Headers
	return pub, info, ctx
}

// endHooks tells every publish hook, in reverse order, how the publish
// startHooks began ended.
func (p *Publisher) endHooks(hctx context.Context, info *PublishInfo, err error) {
	for i := len(p.b.hooks.publish) - 1; i >= 0; i-- {
		p.b.hooks.publish[i].OnPublishDone(hctx, info, err)
	}
}

// check runs the validator on one publish; a hop is trimmed to fit the
// frame (fitHop) rather than refused.
func (p *Publisher) check(key string, pub amqp.Publishing, hop Outcome) (checkedPublish, error) {
	cp, err := checkPublish(p.exchange, key, pub)
	if err == nil && hop != "" {
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
		if again, err := p.conclude(ctx, key, cp, p.await(ctx, key, r)); !again {
			return err
		}
	}
}

// conclude is what a publish returns for outcome o: again when it must be
// written again (its channel ended before its answer), else its error; a
// refusal that may have been another publish's is resolved by sending it
// again alone.
func (p *Publisher) conclude(ctx context.Context, key string, cp *checkedPublish, o pubOutcome) (again bool, err error) {
	switch o.kind {
	case pubResend:
		return true, nil
	case pubRefused:
		return false, p.wrap(key, p.solo(ctx, key, *cp, o.err))
	}
	return false, o.err
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
		wait, ok := pc.enqueue(r, p.mandatory)
		if ok {
			return r, nil
		}
		switch {
		case wait != nil:
			// A publish with the same routing key and message id is in
			// flight (or queued): a return could not be told apart. Wait
			// for its confirm (or its write), then go again.
			if err := waitClosed(ctx, wait, pc); err != nil {
				return nil, fmt.Errorf("mq: publish to %s: %w (nothing was sent: waiting for a publish with the same message id)", p.dest(key), err)
			}
		case !pc.waitDone(ctx): // the channel's writer ended: go again once the channel has
			return nil, fmt.Errorf("mq: publish to %s: %w (nothing was sent)", p.dest(key), ctx.Err())
		}
	}
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

// await waits for a queued publish's answer and returns its outcome,
// errors complete with the destination (but for a refusal, which conclude
// reads).
func (p *Publisher) await(ctx context.Context, key string, r *pubReq) pubOutcome {
	pc := r.pc
	got := true
	select {
	case <-r.done:
	case <-ctx.Done():
		select {
		case <-r.done: // answered already: that wins over an ended ctx
		default:
			if err := p.leave(ctx, key, r); err != nil {
				return failed(err)
			}
			got = false // written: its outcome is read below, an ended ctx included
		}
	}
	dc, werr, seq := r.dc, r.err, r.seq
	if got {
		r.recycle()
	}
	var o pubOutcome
	switch {
	case werr == nil && dc == nil: // cannot happen: the channel is in confirm mode
		if p.mandatory {
			pc.unsent(seq)
		}
		return failed(fmt.Errorf("mq: publish to %s: the channel is not in confirm mode", p.dest(key)))
	case werr != nil:
		if p.mandatory {
			pc.unsent(seq)
		}
		o = judge(p.exchange, answer{writeErr: werr, closed: pc.ended(), lost: pc.st.isLost()})
		// Before a resend, wait for the channel's end: the next write
		// goes to a fresh one (the connection may be coming back).
		if o.kind == pubResend && !pc.waitDone(ctx) {
			return failed(fmt.Errorf("mq: publish to %s: %w (after %v)", p.dest(key), ctx.Err(), werr))
		}
	default:
		o = flight{pc: pc, dc: dc, seq: seq, mandatory: p.mandatory}.await(ctx)
	}
	if o.kind != pubRefused {
		o.err = p.wrap(key, o.err)
	}
	return o
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
			pc.unsent(r.seq)
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

func publishOp(exchange string) string {
	if exchange == "" {
		return "publish to the default exchange"
	}
	return fmt.Sprintf("publish to exchange %q", exchange)
}

// Close closes the publisher's channel. Publishes still waiting for a
// confirm fail with [ErrClosed]. Close is idempotent. On a socket that stopped
// draining it returns once the connection is declared dead (see
// [Config.Heartbeat]); [Broker.Close] bounds it by its own context.
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
			<-c.writeDone
			<-c.wakeDone
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

// Unwrap returns the failures, so errors.Is(err, [ErrUnroutable]) asks
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
// It returns nil when every message was confirmed, or a *[BatchError] saying
// which ones failed and why. Messages in flight when the connection dies are
// sent again, all together, as with Publish.
func (p *Publisher) PublishBatch(ctx context.Context, routingKey string, msgs []Message) error {
	type hooked struct {
		info *PublishInfo
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
			resend, err := p.conclude(ctx, routingKey, &checked[i], p.await(ctx, routingKey, r))
			if resend {
				again = append(again, i)
				continue
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

// IsMandatory reports whether a publisher given opts is mandatory, as
// [Broker.Publisher] builds it (mandatory unless [AllowUnroutable] says
// otherwise).
func IsMandatory(opts ...PublisherOption) bool {
	p := Publisher{mandatory: true}
	for _, o := range opts {
		if o != nil {
			o.applyPublisher(&p)
		}
	}
	return p.mandatory
}
