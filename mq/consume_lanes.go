package mq

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Why a session has more than one channel.
//
// A delivery waiting in-process (Runtime.Wait) stays unacknowledged on
// the channel it came on, and must be settled there. RabbitMQ keeps a
// channel's unacknowledged deliveries in a queue, oldest first, and every
// single ack walks that queue from the front to its tag; a multiple ack
// cannot skip an unsettled one. Waiting deliveries are the oldest, so with
// w of them on the consuming channel every healthy ack costs the broker w
// steps more (measured on 3.10: about +6 µs of broker CPU per message at
// 32 waiting, +60 µs at 300, on a base of about 28 µs), and they count
// against that consumer's prefetch.
//
// So once laneWaiters deliveries wait on the channel the session
// consumes on — or, with coalesced acks and a wide window, once a quarter
// of the ack window piles up above a wait (stuckAcks) — the consumer
// subscribes again on another channel of the same connection (a lane) and
// cancels the first consumer. The waiting deliveries stay where they are
// and are settled there; acks held above them go out as one multiple ack
// once they end (acker.left). The rest of the queue comes on a channel
// with nothing in front of it. A lane left that way is used again once
// little or nothing on it is unsettled (consume and cancel cost the broker
// about 155 µs, a new channel about 540 µs more; one is opened ahead after
// each move), so a session holds at most 1 + maxWaiting/laneWaiters
// channels. With no lane free and none to open, waiting deliveries pile up
// on the consuming channel as before and take their room from its window.

// laneWaiters is how many deliveries may wait on the consuming channel
// before the session moves: the per-ack cost of the ones waiting there
// against the cost of a move, per waiting delivery (about 155 µs/16).
const laneWaiters = 16

// lane is one channel of a session, with its own acknowledgements.
// Delivery tags are the channel's, so a lane's acker lives as long as the
// channel, across the consumers it carries one after the other.
type lane struct {
	ch     *amqp.Channel
	acks   *acker
	closes chan *amqp.Error
	cancel chan string

	held    atomic.Int32  // deliveries received and not yet settled
	waiting atomic.Int32  // of those, waiting in-process
	top     atomic.Uint64 // the highest delivery tag received (see acker.ReleaseRest)
	end     atomic.Uint32 // how the channel ended: laneOpen, laneLost or laneClosed

	// Under session.mu.
	cur *stream // what it consumes or consumed last; nil before the first consume
}

// How a lane's channel ended, as far as its acknowledgements go.
const (
	laneOpen   uint32 = iota // not ended (or ended unnoticed: see acksMayBeLost)
	laneLost                 // lost, or closed with acks perhaps not sent: the broker may not have taken them
	laneClosed               // closed by the session after its acks, the broker's close-ok received: it took them all
)

// acksMayBeLost reports whether an ack settled on l may never have
// reached the broker, which then redelivers the message: the channel was
// lost (or its close failed). On a channel still open the broker holds the
// delivery until the ack comes, and one closed cleanly (closed, below)
// took every ack before its close-ok.
func (l *lane) acksMayBeLost() bool {
	switch l.end.Load() {
	case laneLost:
		return true
	case laneClosed:
		return false
	}
	return l.ch != nil && l.ch.IsClosed()
}

// closed notes how the session's close of l went: clean when its acks
// were sent and the broker answered the channel's close.
func (l *lane) closed(clean bool) {
	if clean {
		l.end.CompareAndSwap(laneOpen, laneClosed)
		return
	}
	l.end.Store(laneLost)
}

// stream is one consumer on a lane: its deliveries, in the order the
// broker sent them. It ends after a cancel, once what was sent before the
// cancel has been read.
type stream struct {
	lane       *lane
	deliveries <-chan amqp.Delivery

	// Under session.mu.
	retired   bool // cancelled by the session moving on
	cancelled bool // the broker confirmed its cancel: nothing more comes
	ended     bool // its deliveries channel was found closed
}

// openLane opens a channel on the session's connection with the
// consumer's prefetch.
func openLane(ctx context.Context, c *Consumer) (*lane, *conn, error) {
	ch, st, err := c.b.channel(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("mq: consumer of %q: %w", c.queue, err)
	}
	closeCh := func() { _ = ch.Close() }
	if err := c.b.bounded(ctx, func() error { return ch.Qos(c.cfg.qos(), 0, false) }, closeCh); err != nil {
		c.b.closeLater(ch)
		return nil, nil, brokerError(fmt.Sprintf("set prefetch for queue %q", c.queue), err)
	}
	l := &lane{ch: ch,
		acks:   newAcker(ch.Ack, giveOn(ch), c.cfg.prefetch),
		closes: ch.NotifyClose(make(chan *amqp.Error, 1)),
		cancel: ch.NotifyCancel(make(chan string, 1))}
	return l, st, nil
}

// giveOn sends a giveBack on ch.
func giveOn(ch *amqp.Channel) func(uint64, giveBack) error {
	return func(tag uint64, how giveBack) error {
		switch how {
		case giveRelease:
			return ch.Nack(tag, false, true)
		case giveReleaseUpTo:
			return ch.Nack(tag, true, true)
		}
		return ch.Reject(tag, how == giveRequeue)
	}
}

// received notes tag received on l.
func (l *lane) received(tag uint64) {
	for {
		top := l.top.Load()
		if tag <= top || l.top.CompareAndSwap(top, tag) {
			return
		}
	}
}

// stuckAcks is the acker's stuck for l: acks pile up above a delivery
// waiting on the lane consumed on, and would go one frame each. A move
// costs about what a dozen single acks do, so it is asked for only with a
// window wide enough (stuckMinPrefetch) and while a lane is free to move
// to; the acks on l then wait for the holes (leftDelay).
func (s *session) stuckAcks(l *lane) func() bool {
	return func() bool {
		if s.active.Load() != l || l.waiting.Load() == 0 || !s.free.Load() {
			return false
		}
		s.askMove()
		return true
	}
}

// consume subscribes the lane to the consumer's queue.
func (l *lane) consume(ctx context.Context, c *Consumer) (*stream, error) {
	var deliveries <-chan amqp.Delivery
	err := c.b.bounded(ctx, func() (err error) {
		deliveries, err = l.ch.Consume(c.queue, c.cfg.tag, false, false, false, false, nil)
		return err
	}, func() { _ = l.ch.Close() })
	if err != nil {
		return nil, brokerError(fmt.Sprintf("consume queue %q", c.queue), err)
	}
	return &stream{lane: l, deliveries: deliveries}, nil
}

// stuckMinPrefetch is the smallest prefetch for which acks stuck above a
// waiting delivery move the session (see stuckAcks).
const stuckMinPrefetch = 64

// join makes l one of the session's lanes: watched, and asking for a
// move when its acks get stuck.
func (s *session) join(l *lane) {
	cfg := s.c.cfg
	if cfg.maxLanes() > 1 && cfg.prefetch >= stuckMinPrefetch {
		l.acks.stuck = s.stuckAcks(l)
	}
	s.watch(l)
}

// watch reports the first close or broker cancel of l's channel to the
// session (lost, cancels): either ends it. A channel that dies tells its
// close and then closes its cancel notifications, both ready at once: a
// closed cancel notification is that death, never a broker cancel, and is
// told as the close it follows.
func (s *session) watch(l *lane) {
	go func() {
		var e *amqp.Error
		select {
		case e = <-l.closes:
		case tag, ok := <-l.cancel:
			if ok {
				select {
				case s.cancels <- tag:
				default:
				}
				return
			}
			e = <-l.closes // sent before the cancel notifications closed, or closed itself
		}
		select {
		case s.lost <- e:
		default:
		}
	}()
}

// reading is the stream the workers read: the oldest not ended, so a moved
// session's deliveries are handled in the order they came.
func (s *session) reading() *stream { return s.head.Load() }

// streamEnded is called by a worker that found st's deliveries channel
// closed. It reports whether the session goes on (st was left by a
// move, and the next stream is read now) or has ended (the consumer it
// reads was closed under it: the broker cancelled it, or the channel died).
func (s *session) streamEnded(st *stream) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !st.retired {
		return false
	}
	if !st.ended {
		st.ended = true
		s.streams = s.streams[1:] // st is the head: only the head is read
		s.head.Store(s.streams[0])
		s.flushLeftLocked(st.lane)
		s.refreshFreeLocked()
	}
	return true
}

// dropHeld counts a delivery of l off the lane once it is settled, and
// flushes a left lane's acks once none is held.
func (s *session) dropHeld(l *lane) {
	if n := l.held.Add(-1); n == 0 || n == laneWaiters/2-1 {
		s.mu.Lock()
		s.flushLeftLocked(l)
		s.refreshFreeLocked()
		s.mu.Unlock()
	}
}

// flushLeftLocked sends the acks held on a lane the session has
// left once nothing on it is unsettled: one multiple ack covers them.
func (s *session) flushLeftLocked(l *lane) {
	if l.cur != nil && l.cur.retired && l.cur.ended && l.held.Load() == 0 {
		_ = l.acks.Flush() // everything on it is settled: one multiple ack
	}
}

// pickLocked chooses the lane to move to: of the lanes left by earlier
// moves whose streams have ended, the one holding fewest deliveries, if
// it holds few (reusing a channel is cheaper than a new one, and what
// still waits on it is little to walk); nil if a new lane should be opened
// (canOpen) or if none holds fewer than old has waiting.
func (s *session) pickLocked(old *lane, canOpen bool) *lane {
	var best *lane
	for _, l := range s.lanes {
		if l == old {
			continue
		}
		if l.cur == nil {
			return l // a spare, opened ahead
		}
		if !l.cur.retired || !l.cur.ended {
			continue
		}
		if best == nil || l.held.Load() < best.held.Load() {
			best = l
		}
	}
	switch {
	case best == nil:
		return nil
	case best.held.Load() < laneWaiters/2:
		return best
	case canOpen:
		return nil
	case best.held.Load() < old.waiting.Load():
		return best
	}
	return nil
}

// waitStarts notes a delivery of l waiting in-process, and asks for a move
// if too many wait on the lane consumed on now.
func (s *session) waitStarts(l *lane) {
	if l.waiting.Add(1) >= laneWaiters && s.active.Load() == l {
		s.askMove()
	}
}

func (s *session) askMove() {
	select {
	case s.move <- struct{}{}:
	default:
	}
}

// waitEnds notes the end of a wait of l's.
func (s *session) waitEnds(l *lane) { l.waiting.Add(-1) }

// mover moves the session whenever a wait (waitStarts) or a pile of
// acks (stuckAcks) asks for it, until the session drains.
func (s *session) mover() {
	c := s.c
	defer close(s.moverDone)
	// A move in progress ends with the session: a drain (Stop, a lost
	// channel) must not wait on a channel being opened on a connection
	// that is down.
	life, end := context.WithCancel(s.ctx)
	defer end()
	go func() {
		select {
		case <-s.draining:
			end()
		case <-life.Done():
		}
	}()
	var notBefore time.Time
	for {
		select {
		case <-s.draining:
			return
		case <-s.move:
		}
		var moved bool
		var err error
		if !time.Now().Before(notBefore) {
			if moved, err = s.moveOn(life); err == nil && moved {
				err = s.spareLane(life)
			}
		}
		if !moved {
			// The lane consumed on keeps its acks: one by one again
			// above a hole.
			s.active.Load().acks.Leave(false)
		}
		if err != nil {
			// Keep consuming where it is; a dead channel is noticed by
			// the session. Try again a little later.
			c.log.Debug("acemq.consumer.move.failed", "error", err)
			notBefore = time.Now().Add(time.Second)
		}
	}
}

// moveOn subscribes on a free lane (a spare, one whose deliveries are
// settled, or a new one) and cancels the consumer of the lane consumed on
// now; moved says whether it did. What the broker sent the old consumer is
// still read first, handled and settled on its own channel.
func (s *session) moveOn(life context.Context) (moved bool, err error) {
	c := s.c
	old := s.active.Load()
	if old.waiting.Load() == 0 {
		return false, nil // waits ended meanwhile
	}
	ctx, cancel := context.WithTimeout(life, 10*time.Second)
	defer cancel()
	s.mu.Lock()
	next := s.pickLocked(old, len(s.lanes) < c.cfg.maxLanes())
	s.mu.Unlock()
	if next == nil {
		if next, err = s.addLane(ctx); next == nil {
			return false, err // none free and no room for one: waiting deliveries take room from the window
		}
	}
	st, err := next.consume(ctx, c)
	if err != nil {
		return false, err // its channel is closed (consume closes it on a late answer): watch ends the session
	}
	s.mu.Lock()
	if s.isDraining() {
		// The drain came while it subscribed. Its ctx ends with the drain,
		// so it cannot cancel this consumer itself: the stream joins the
		// session's, for the Stop to cancel (cancelStreams) and to give back
		// what it was sent (releaseUnread, close) rather than leave it to
		// the channel's close, which RabbitMQ 4.3 counts.
		next.cur = st
		s.streams = append(s.streams, st)
		s.mu.Unlock()
		return false, nil
	}
	old.cur.retired = true
	old.acks.Leave(true)
	next.acks.Leave(false)
	next.cur = st
	s.streams = append(s.streams, st)
	s.active.Store(next)
	s.refreshFreeLocked()
	s.mu.Unlock()
	// amqp091 closes the old deliveries channel once the broker has
	// confirmed the cancel and what it sent before has been read. Until
	// then the workers read nothing newer; a cancel that goes unanswered
	// ends the session, which starts again on fresh channels.
	if err := c.b.bounded(ctx, func() error { return old.ch.Cancel(c.cfg.tag, false) }, nil); err != nil {
		if s.isDraining() {
			return true, nil // cut by the drain: the stop cancels what is left (cancelStreams)
		}
		select {
		case s.lost <- amqp.ErrClosed:
		default:
		}
		return true, err
	}
	s.mu.Lock()
	old.cur.cancelled = true
	s.mu.Unlock()
	return true, nil
}

// addLane opens a lane for the session if it may hold one more; nil
// if not, or if the session is draining.
func (s *session) addLane(ctx context.Context) (*lane, error) {
	c := s.c
	if len(s.allLanes()) >= c.cfg.maxLanes() || !s.st.takeLane() {
		return nil, nil
	}
	l, _, err := openLane(ctx, c)
	if err != nil {
		s.st.dropLane()
		return nil, err
	}
	s.mu.Lock()
	if s.isDraining() { // the session's close may have listed its lanes already
		s.mu.Unlock()
		_ = l.ch.Close()
		s.st.dropLane()
		return nil, nil
	}
	s.lanes = append(s.lanes, l)
	s.mu.Unlock()
	s.join(l)
	return l, nil
}

// spareLane opens a lane ahead of the next move, unless one is free
// already: with one at hand a move costs two round trips, not four.
func (s *session) spareLane(life context.Context) error {
	if s.free.Load() {
		return nil
	}
	ctx, cancel := context.WithTimeout(life, 10*time.Second)
	defer cancel()
	l, err := s.addLane(ctx)
	if l != nil {
		s.mu.Lock()
		s.refreshFreeLocked()
		s.mu.Unlock()
	}
	return err
}

// refreshFreeLocked notes whether a lane is free for the next move.
func (s *session) refreshFreeLocked() {
	s.free.Store(s.pickLocked(s.active.Load(), false) != nil)
}
