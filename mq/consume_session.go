package mq

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// session is one connection's worth of consuming: the lanes
// (channels) it consumes on, one after the other (see consume_lanes.go), and the
// workers that handle what comes on them.
type session struct {
	c         *Consumer
	st        *conn
	lost      chan *amqp.Error // a lane's channel closed
	cancels   chan string      // the broker cancelled a lane's consumer
	refused   chan string      // a delivery carried x-stream-offset (refuses)
	ctx       context.Context  // the handlers' context
	cancel    context.CancelFunc
	draining  chan struct{}
	drainOnce sync.Once
	closeOnce sync.Once

	// slots holds one token per delivery being handled: at most the
	// consumer's concurrency. A delivery waiting in-process gives its token
	// back (wait) and a worker goroutine is added in its place, so
	// the queue goes on; workers counts those goroutines. The tokens are
	// the consumer's (Consumer.slots), shared by its sessions: a handler
	// still running after its session ended (it ignores its context) keeps
	// its own token in the next session, and only that one.
	slots   chan struct{}
	workers atomic.Int32
	wg      sync.WaitGroup

	head      atomic.Pointer[stream] // the stream the workers read
	active    atomic.Pointer[lane]   // the lane whose consumer is live
	move      chan struct{}          // a wait asks the mover to move on
	free      atomic.Bool            // a lane to move to is at hand (refreshFreeLocked)
	moverDone chan struct{}

	mu      sync.Mutex
	lanes   []*lane   // every channel it holds
	streams []*stream // not ended, oldest first; the last is active's

	// What refuses found, once a delivery carried x-stream-offset.
	offsetMu  sync.Mutex
	asked     bool        // the broker was asked whether the queue is a stream
	refusing  bool        // no delivery that carries the header is handled
	ends      error       // the queue is a stream: the consumer ends with it (Consumer.run)
	noRelease atomic.Bool // close gives nothing back (shut): a delivery perhaps a stream's is unsettled
}

func (s *session) drain() { s.drainOnce.Do(func() { close(s.draining) }) }

func (s *session) isDraining() bool {
	select {
	case <-s.draining:
		return true
	default:
		return false
	}
}

// close gives the channels up, after sending the acknowledgements still
// due on them (on a channel already dead that send fails, and the broker
// has requeued those deliveries anyway) and giving back what was received
// and never started: one multiple basic.nack per channel (acker.ReleaseRest),
// nobody's failure, which RabbitMQ 4.3 does not count toward a quorum
// queue's delivery limit, then a round trip on the channel before its
// close (basic.qos: its answer comes once the broker has taken the nack; a
// close that overtook it would return the rest as failed, which 4.3 counts).
func (s *session) close() { s.shut(true) }

// shut is close; release false leaves what is unsettled to the channel's
// close (a Stop whose deadline passed, handlers still running).
func (s *session) shut(release bool) {
	s.closeOnce.Do(func() {
		c := s.c
		release = release && !s.noRelease.Load() // a stream's nack closes the connection on 3.10 (refuses)
		for _, l := range s.allLanes() {
			if release {
				if done, _ := l.acks.ReleaseRest(l.top.Load()); done {
					ctx, cancel := s.releaseCtx()
					_ = c.b.bounded(ctx, func() error { return l.ch.Qos(c.cfg.qos(), 0, false) }, nil)
					cancel()
				}
			}
			open := !l.ch.IsClosed() // Close answers nil for a channel closed already
			aerr := l.acks.Close()
			cerr := l.ch.Close()
			l.closed(open && aerr == nil && cerr == nil)
		}
		for range len(s.allLanes()) - 1 {
			s.st.dropLane() // every lane but the first came from the budget
		}
	})
}

// releaseCtx bounds close's round trip: the Stop's context, and at most
// releaseWait.
func (s *session) releaseCtx() (context.Context, context.CancelFunc) {
	c := s.c
	c.mu.Lock()
	ctx := c.stopCtx
	c.mu.Unlock()
	if ctx == nil {
		ctx = context.Background()
	}
	return context.WithTimeout(ctx, releaseWait)
}

// dropAcks forgets the acknowledgements not sent: a channel died (or
// the broker took back what it had sent), so an ack settled on it may
// not have reached the broker (lane.acksMayBeLost).
func (s *session) dropAcks() {
	for _, l := range s.allLanes() {
		l.acks.Drop()
		l.closed(false)
	}
}

func (s *session) allLanes() []*lane {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*lane(nil), s.lanes...)
}

// openSession opens the first lane of a new session of c and consumes on
// it; the session's workers start with serve.
func openSession(ctx context.Context, c *Consumer) (*session, error) {
	l, cn, err := openLane(ctx, c)
	if err != nil {
		return nil, err
	}
	st, err := l.consume(ctx, c)
	if err != nil {
		c.b.closeLater(l.ch)
		return nil, err
	}
	s := &session{c: c, st: cn, draining: make(chan struct{}), slots: c.slots,
		lost: make(chan *amqp.Error, 1), cancels: make(chan string, 1), refused: make(chan string, 1),
		move: make(chan struct{}, 1), moverDone: make(chan struct{}),
		lanes: []*lane{l}, streams: []*stream{st}}
	l.cur = st
	s.head.Store(st)
	s.active.Store(l)
	s.join(l)
	s.ctx, s.cancel = context.WithCancel(context.Background())
	return s, nil
}

// serve runs the workers on s until it ends or the consumer stops, and
// returns why it ended. Every worker has returned when serve does.
func (s *session) serve() string {
	c := s.c
	for range c.cfg.concurrency {
		s.spawn()
	}
	if c.cfg.maxLanes() > 1 {
		go s.mover()
	} else {
		close(s.moverDone)
	}
	defer func() {
		s.drain() // the mover's cue, whatever ended the session
		<-s.moverDone
	}()
	workersDone := make(chan struct{})
	go func() {
		s.wg.Wait()
		close(workersDone)
	}()
	select {
	case <-c.stopping:
		s.drain()
		// No new deliveries; in-flight ones still settle on their
		// channels. The mover, having seen the drain, moves no more.
		<-s.moverDone
		s.cancelStreams()
		select {
		case <-workersDone:
			s.releaseUnread(c.abort)
		case <-c.abort:
			s.shut(false) // first: the broker requeues what was not settled,
			s.cancel()    // and a handler cut short can no longer reject it
			<-workersDone
		}
		return "stopped"
	case e := <-s.lost:
		// A channel (or the connection) is gone, and with it its
		// unsettled deliveries: the broker has requeued them. Stop the
		// work; the other channels are closed with the session.
		s.dropAcks()
		s.drain()
		s.cancel()
		s.awaitCut(workersDone)
		if e == nil {
			return "channel closed"
		}
		return e.Error()
	case <-s.cancels:
		if s.queueStays() {
			// The broker cancelled the consumer of a queue that is still
			// there (RabbitMQ 4.3's consumer_timeout does, where earlier
			// versions close the channel): it has taken back what it sent
			// this consumer. As after a lost channel, nothing of it may be
			// settled or carried: the broker redelivers it.
			s.dropAcks()
			s.drain()
			s.cancel()
			s.awaitCut(workersDone)
			return "consumer cancelled by the broker, its queue still there (consumer_timeout?)"
		}
		// The broker cancelled the consumer (its queue was deleted): the
		// channel lives, so in-flight deliveries still settle on it.
		s.drain()
		<-workersDone
		return "consumer cancelled by the broker (queue deleted?)"
	case why := <-s.refused:
		// A delivery showed the queue is a stream, or could not be told
		// from one (refuses). No worker handles what carries the header,
		// and nothing is given back (noRelease): the channel's close ends
		// the subscription, a stream keeps its messages, and a queue gets
		// back what it had sent. A handler of a delivery without the header
		// (a queue, then) finishes and settles first.
		s.drain()
		<-workersDone
		return why
	case <-workersDone:
		s.drain()
		// A channel that died closed its deliveries a moment after
		// telling its close, and the workers may have seen the first
		// before watch passed on the second: wait a little for it, so the
		// loss is read as one (its error is what the flap guard judges).
		select {
		case e := <-s.lost:
			s.dropAcks()
			if e == nil {
				return "channel closed"
			}
			return e.Error()
		case <-time.After(lossTold):
		}
		return "delivery stream ended"
	}
}

// lossTold is how long a session whose deliveries all ended waits for the
// close of the channel that ended them.
const lossTold = 250 * time.Millisecond

// release counts off a delivery of st that was never started: it goes
// back with the others at the session's close (close, acker.ReleaseRest).
// On a dead channel the broker has returned it already.
func (s *session) release(st *stream) {
	st.lane.held.Add(-1)
}

// cancelStreams cancels, at Stop, every consumer of s the broker has not
// confirmed cancelled: the one consumed on, and one a move left behind
// when the drain cut its cancel short. Each cancel is bounded by the
// Stop's context; a stream whose cancel fails stays unconfirmed.
func (s *session) cancelStreams() {
	c := s.c
	c.mu.Lock()
	ctx := c.stopCtx
	c.mu.Unlock()
	s.mu.Lock()
	streams := slices.Clone(s.streams)
	s.mu.Unlock()
	for _, st := range streams {
		s.mu.Lock()
		done := st.cancelled || st.ended
		s.mu.Unlock()
		if done {
			continue
		}
		if c.b.bounded(ctx, func() error { return st.lane.ch.Cancel(c.cfg.tag, false) }, nil) == nil {
			s.mu.Lock()
			st.cancelled = true
			s.mu.Unlock()
		}
	}
}

// releaseUnread reads what the broker sent and no worker took, once
// the consumer is cancelled and its workers are done: each stream whose
// cancel the broker confirmed is read to its end (amqp091 ends it after
// the cancel-ok, once what came before is read; a stream still consuming
// would only be sent each message again), its tags noted on its lane for
// close's multiple nack. A stream not confirmed, one whose end does not
// come within releaseWait, or an abort, leaves the rest to the channel's
// close, which returns it too.
func (s *session) releaseUnread(abort <-chan struct{}) {
	s.mu.Lock()
	var streams []*stream
	for _, st := range s.streams {
		if st.cancelled && !st.ended {
			streams = append(streams, st)
		}
	}
	s.mu.Unlock()
	t := time.NewTimer(releaseWait)
	defer t.Stop()
	for _, st := range streams {
	read:
		for {
			select {
			case raw, ok := <-st.deliveries:
				if !ok {
					break read
				}
				st.lane.received(raw.DeliveryTag) // given back at close
				if _, ok := raw.Headers[headerStreamOffset]; ok {
					s.noRelease.Store(true) // perhaps a stream's: left to the close (refuses)
				}
			case <-t.C:
				return
			case <-abort:
				return
			}
		}
	}
}

// releaseWait bounds releaseUnread.
const releaseWait = 2 * time.Second

// spawn adds a worker goroutine; the session's wait group owns it.
func (s *session) spawn() {
	s.workers.Add(1)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.work()
	}()
}

// work takes deliveries one at a time and handles each holding a slot. A
// worker beyond the concurrency (added while a delivery waited) retires
// after its delivery.
func (s *session) work() {
	c := s.c
	for {
		st := s.reading()
		select {
		case <-s.draining:
			s.workers.Add(-1)
			return
		case raw, ok := <-st.deliveries:
			if !ok {
				if s.streamEnded(st) {
					continue // left by a move: read the next
				}
				s.workers.Add(-1)
				return
			}
			st.lane.held.Add(1)
			st.lane.received(raw.DeliveryTag)
			if s.refuses(st.lane, &raw) {
				s.release(st) // never started, never given back (noRelease)
				s.workers.Add(-1)
				return
			}
			select {
			case s.slots <- struct{}{}:
			case <-s.draining:
				s.release(st) // not started
				s.workers.Add(-1)
				return
			}
			select {
			case <-s.draining: // both were ready: draining wins
				<-s.slots
				s.release(st)
				s.workers.Add(-1)
				return
			default:
			}
			s.handle(st.lane, raw)
		}
		if n := s.workers.Load(); n > int32(c.cfg.concurrency) && s.workers.CompareAndSwap(n, n-1) {
			return
		}
	}
}

func (s *session) handle(l *lane, raw amqp.Delivery) {
	c := s.c
	raw.Acknowledger = nil // settlement belongs to the runtime
	restoreOrigin(&raw)
	attempt, aside := c.memo.recall(raw)
	d := received(raw)
	d.queue, d.attempt, d.aside, d.from, d.lane, d.slot = c.queue, attempt, aside, s, l, true
	ctx := s.ctx
	hooks := c.b.hooks.delivery
	for _, h := range hooks {
		ctx = h.OnDelivery(ctx, d)
	}
	err := c.runner.Deliver(ctx, d)
	s.settle(d, err)
	s.dropHeld(l)
	if d.slot {
		<-s.slots
	}
	for i := len(hooks) - 1; i >= 0; i-- {
		hooks[i].OnDeliveryDone(ctx, d, err)
	}
}

// wait is an in-process retry's wait on a consumer (Runtime.Wait): d waits w without its slot (unless
// the consumer keeps order) while a new worker takes the slot's place; then
// it takes a slot again for its next attempt.
func (s *session) wait(ctx context.Context, d *Delivery, w time.Duration) error {
	c := s.c
	free := d.slot && !c.cfg.inOrder
	if free {
		// While it waits, this goroutine is no worker: one takes its place.
		d.slot = false
		<-s.slots
		if s.workers.Add(-1) < int32(c.cfg.concurrency) {
			s.spawn()
		}
	}
	if free && c.cfg.maxLanes() > 1 {
		s.waitStarts(d.lane)
		defer s.waitEnds(d.lane)
	}
	err := waitFor(ctx, s.draining, w)
	if free {
		s.workers.Add(1) // back in its worker loop after this delivery; retires if one too many
		if err == nil {
			select {
			case s.slots <- struct{}{}:
				d.slot = true
			case <-s.draining:
				err = errWaitCut
			case <-ctx.Done():
				err = errWaitCut
			}
		}
	}
	return err
}

// waitFor waits w, or until ctx ends or cut closes: then errWaitCut.
func waitFor(ctx context.Context, cut <-chan struct{}, w time.Duration) error {
	if w <= 0 {
		if ctx.Err() != nil {
			return errWaitCut
		}
		return nil
	}
	t := time.NewTimer(w)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
	case <-cut:
	}
	return errWaitCut
}

// settle acknowledges or returns d on the channel it came on. A channel
// that has died since is never replaced by another: the broker has already
// requeued the delivery.
func (s *session) settle(d *Delivery, err error) {
	c := s.c
	var serr error
	switch {
	case err != nil && s.ctx.Err() != nil:
		// We cut the handler short (lost channel, stop deadline): its
		// failure is ours, not the message's. Back to the queue, and the
		// attempt it used remembered for its redelivery. By now the
		// channel is gone or closing, so it is its close that returns the
		// message (which RabbitMQ 4.3 counts); the release says what we
		// would have sent.
		d.outcome, d.cause = OutcomeRequeue, err
		c.memo.remember(d)
		s.requeued(d, kindCutShort, err)
		serr = d.lane.acks.Give(d.DeliveryTag, giveRelease)
	case err == nil:
		if d.outcome == "" {
			d.outcome = OutcomeAck
		}
		serr = d.lane.acks.Ack(d.DeliveryTag)
	case errors.Is(err, ErrRequeue):
		d.outcome, d.cause = OutcomeRequeue, err
		c.memo.remember(d)
		why := kindRequeue
		if _, ok := errors.AsType[*PanicError](err); ok {
			why = kindPanic
		}
		how, pause := giveRequeue, c.cfg.requeuePause // counted: the message failed
		switch {
		case d.asideFailed:
			how, pause = giveRelease, asidePause(pause, d.Headers)
		case d.kept:
			// InOrder, a wait cut short by a Stop: nobody's failure, and
			// no pause (the consumer is stopping); back in its place.
			how, pause, why = giveRelease, 0, kindCutShort
		}
		s.requeued(d, why, err)
		if pause > 0 {
			t := time.NewTimer(pause)
			select {
			case <-t.C:
			case <-s.draining:
			}
			t.Stop()
		}
		serr = d.lane.acks.Give(d.DeliveryTag, how)
	default:
		d.outcome, d.cause = OutcomeReject, err
		c.log.Warn("acemq.message.rejected", "message_id", d.MessageId, "attempt", d.attempt, "error", err)
		serr = d.lane.acks.Give(d.DeliveryTag, giveReject)
	}
	if serr != nil {
		c.log.Debug("acemq.settle.skipped", "message_id", d.MessageId, "outcome", string(d.outcome), "error", serr)
	}
}

// asidePause is the pause before returning a delivery whose set-aside
// failed (EventSetAsideFailed), which goes back with basic.nack: the
// library's failure, not the message's, which RabbitMQ 4.3 does not count
// toward a quorum queue's delivery limit. Up to 4.2 every return counts,
// and a queue with no dead-letter route drops the message past its limit:
// so the pause doubles with each return the broker has counted
// (x-delivery-count, or on 4.3 x-acquired-count, which counts every one),
// up to asidePauseMax, so that the limit (20 by default) is reached only
// after about 13 minutes of set-asides failing with the default pause
// (200 ms), not 4 seconds, and a loop on 4.3 costs little.
func asidePause(pause time.Duration, h amqp.Table) time.Duration {
	n, _ := deliveryCount(h)
	if a, ok := h[headerAcquiredCount].(int64); ok && int(min(a, 64)) > n {
		n = int(a)
	}
	return min(pause<<min(n, 16), asidePauseMax)
}

// headerAcquiredCount is the header RabbitMQ 4.3 puts on a quorum queue's
// redelivery: every return of the copy, counted or not.
const headerAcquiredCount = "x-acquired-count"

// asidePauseMax bounds asidePause, far below the broker's delivery
// timeout (consumer_timeout, 30 minutes by default).
const asidePauseMax = time.Minute

// requeued reports a return of d to its queue: each one counts against a
// quorum queue's delivery limit (RabbitMQ 4.x: 20 by default), past which
// the broker dead-letters the message or, with no dead-letter route, drops
// it. The event and its metric make such loops visible.
func (s *session) requeued(d *Delivery, why string, err error) {
	c := s.c
	n, _ := deliveryCount(d.Headers)
	c.log.Warn(EventRequeued, "message_id", d.MessageId, "attempt", d.attempt, "why", string(why),
		"delivery_count", n, "error", err)
	c.b.hooks.emit(s.ctx, Event{Name: EventRequeued, Queue: c.queue, Attempt: d.attempt, Kind: why, Err: err})
}

// The session carries out its deliveries' decisions.
var (
	_ Runtime         = (*session)(nil)
	_ consumerRuntime = (*session)(nil)
)

// Hop publishes a hop on the consumer's own publisher.
func (s *session) Hop(ctx context.Context, queue string, kind Outcome, m Message) error {
	return s.c.hops().publish(ctx, queue, m, kind)
}

// Wait is wait, for the Runner.
func (s *session) Wait(ctx context.Context, d *Delivery, w time.Duration) error {
	return s.wait(ctx, d, w)
}

// Event reports e to the broker's EventHooks.
func (s *session) Event(ctx context.Context, e Event) { s.c.b.hooks.emit(ctx, e) }

// Logger is the consumer's logger.
func (s *session) Logger() *slog.Logger { return s.c.log }

func (s *session) drains() <-chan struct{} { return s.draining }

func (s *session) server() string { return s.st.server }

func (s *session) login() string { return s.c.b.login() }

func (s *session) cutShort() bool { return s.ctx.Err() != nil }

func (s *session) keepsOrder() bool { return s.c.cfg.inOrder }

func (s *session) hopped(d *Delivery, at int) { s.c.memo.rememberHop(d, at) }
