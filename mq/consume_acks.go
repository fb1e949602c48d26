package mq

import (
	"slices"
	"sync"
	"time"
)

// ackDelay is how long a positive acknowledgement may wait to be sent with
// others in one multiple ack; aboveDelay how long one settled above a
// delivery still in hand may wait for that one to be settled, before it is
// sent on its own.
const (
	ackDelay   = 5 * time.Millisecond
	aboveDelay = 50 * time.Millisecond
	// leftDelay is aboveDelay on a channel the session has moved
	// from: nothing new comes there, so acks held above its waiting
	// deliveries take no room from any window, and once those are settled
	// one multiple ack covers them all.
	leftDelay = 250 * time.Millisecond
)

// acker settles one channel's deliveries. Delivery tags on a channel with
// one consumer are 1, 2, 3, … in the order the broker sends them, so the
// settled ones below the lowest unsettled tag (next) form a prefix a single
// multiple ack can cover, as long as that ack names a tag the broker still
// holds (RabbitMQ refuses a multiple ack for a tag it does not know).
type acker struct {
	ack  func(tag uint64, multiple bool) error
	give func(tag uint64, how giveBack) error
	// flushAt is how many positive acks may wait before a flush.
	flushAt int

	mu      sync.Mutex
	next    uint64           // lowest tag not known to be settled
	top     uint64           // highest tag below next settled positively and not yet sent (0: none)
	sent    uint64           // every tag up to here is covered by what was sent
	above   map[uint64]uint8 // tags >= next settled already: tagPending, tagSent or tagReturned
	prefix  int              // positive acks below next not sent yet
	pending int              // tagPending entries in above (acked above a hole, not sent)
	since   time.Time        // when pending last went from 0 to 1
	timer   *time.Timer
	closed  bool
	left    bool // on a channel the session moved from (leftDelay)
	// stuck, if set, is asked (with mu held) to move the session on
	// when acks pile up above a hole; true if it will.
	stuck func() bool
}

const (
	tagPending  uint8 = iota + 1 // acknowledged by the handler, not on the wire yet
	tagSent                      // acknowledged on its own (above a hole)
	tagReturned                  // nacked or rejected (sent at once)
)

// giveBack is how a delivery goes back to the broker other than by an
// ack. RabbitMQ 4.3 and later count a return toward a quorum queue's
// delivery limit (x-delivery-count) only when it says the message failed:
// basic.reject does, basic.nack with requeue does not (x-acquired-count
// counts both). Earlier versions count every return.
type giveBack uint8

const (
	giveReject      giveBack = iota // basic.reject, no requeue: dead-lettered or dropped
	giveRequeue                     // basic.reject with requeue: the message failed; counted
	giveRelease                     // basic.nack with requeue: nobody's failure; not counted on 4.3+
	giveReleaseUpTo                 // giveRelease, multiple: every delivery up to the tag not settled yet
)

func newAcker(ack func(uint64, bool) error, give func(uint64, giveBack) error, prefetch int) *acker {
	return &acker{ack: ack, give: give, flushAt: max(1, prefetch/2), next: 1, above: make(map[uint64]uint8)}
}

// Ack records a positive settlement of tag and sends what is due.
func (a *acker) Ack(tag uint64) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return ErrClosed
	}
	if tag == a.next {
		// In order, the common case: the prefix grows by one, with no map
		// entry and no clock read.
		a.top = tag
		a.prefix++
		a.next++
	} else {
		if a.pending == 0 {
			a.since = time.Now()
		}
		a.above[tag] = tagPending
		a.pending++
	}
	a.advanceLocked()
	if a.stuck != nil && !a.left && a.pending >= a.flushAt/4 && a.stuck() {
		// The session moves on: from now on the acks here wait for
		// the holes below them instead of going one by one.
		a.left = true
	}
	switch {
	case a.prefix+a.pending >= a.flushAt:
		return a.flushLocked(a.pending >= a.flushAt/2 && !a.left)
	case a.timer == nil:
		a.timer = time.AfterFunc(ackDelay, a.flushTimer)
	}
	return nil
}

// Give sends the positive acks due below tag's, then gives tag back.
func (a *acker) Give(tag uint64, how giveBack) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return ErrClosed
	}
	ferr := a.flushLocked(false)
	if err := a.give(tag, how); err != nil {
		return err
	}
	a.above[tag] = tagReturned
	a.advanceLocked()
	return ferr
}

// ReleaseRest sends the positive acks due, then gives back every delivery
// up to top (the highest tag received) not settled yet with one multiple
// basic.nack, and refuses anything later. A multiple nack must name a tag
// the broker still holds, so it names the highest unsettled one; released
// says whether there was one.
func (a *acker) ReleaseRest(top uint64) (released bool, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return false, ErrClosed
	}
	err = a.flushLocked(true)
	a.closed = true
	for tag := top; tag >= a.next && tag > 0; tag-- {
		if _, done := a.above[tag]; done {
			continue
		}
		if gerr := a.give(tag, giveReleaseUpTo); gerr != nil {
			return false, gerr
		}
		return true, err
	}
	return false, err
}

// Leave marks the channel as one the session moved from (true) or
// consumes on again (false).
func (a *acker) Leave(left bool) {
	a.mu.Lock()
	a.left = left
	a.mu.Unlock()
}

// Flush sends every positive ack that is due now.
func (a *acker) Flush() error { return a.flush(false) }

// Close flushes and refuses anything later: the channel is being given up.
func (a *acker) Close() error { return a.flush(true) }

func (a *acker) flush(end bool) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil
	}
	a.closed = end
	return a.flushLocked(true)
}

// Drop forgets what was not sent: the channel died, and the broker has
// returned every delivery it did not see acknowledged.
func (a *acker) Drop() {
	a.mu.Lock()
	a.closed = true
	if a.timer != nil {
		a.timer.Stop()
		a.timer = nil
	}
	a.mu.Unlock()
}

func (a *acker) flushTimer() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.timer = nil
	if a.closed {
		return
	}
	delay := aboveDelay
	if a.left {
		delay = leftDelay
	}
	_ = a.flushLocked(time.Since(a.since) >= delay) // a failed send means a dead channel: the broker requeues
	if a.pending > 0 && a.timer == nil {
		a.timer = time.AfterFunc(ackDelay, a.flushTimer)
	}
}

// advanceLocked moves next past every settled tag, noting the highest
// positive one not sent yet.
func (a *acker) advanceLocked() {
	for len(a.above) > 0 {
		st, ok := a.above[a.next]
		if !ok {
			return
		}
		delete(a.above, a.next)
		if st == tagPending {
			a.top = a.next
			a.pending--
			a.prefix++
		}
		a.next++
	}
}

// flushLocked sends the multiple ack for the settled prefix and, with
// above, the positive acks above the first delivery still in hand, one by
// one (a multiple ack there would cover it).
func (a *acker) flushLocked(above bool) error {
	if a.timer != nil {
		a.timer.Stop()
		a.timer = nil
	}
	var err error
	if a.top > a.sent {
		// Every tag up to top is settled: the ones the broker still holds
		// are positive ones, and top is one of them.
		if err = a.ack(a.top, true); err == nil {
			a.sent = a.top
		}
	}
	a.prefix = 0
	if above && a.pending > 0 {
		// Lowest first: the broker finds each tag by walking the
		// channel's unacknowledged deliveries from the oldest, so in this
		// order each walk stops just past the holes below it.
		tags := make([]uint64, 0, a.pending)
		for tag, st := range a.above {
			if st == tagPending {
				tags = append(tags, tag)
			}
		}
		slices.Sort(tags)
		for _, tag := range tags {
			if e := a.ack(tag, false); e != nil && err == nil {
				err = e
			}
			a.above[tag] = tagSent
		}
		a.pending = 0
	}
	return err
}
