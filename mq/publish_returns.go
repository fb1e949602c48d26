package mq

import (
	amqp "github.com/rabbitmq/amqp091-go"
)

// fingerprint identifies a mandatory publish to the basic.return that may
// come back for it: routing key and message id.
type fingerprint struct{ key, id string }

// returnable is a mandatory publish in flight: a basic.return may still
// come for it.
type returnable struct {
	fp         fingerprint
	sent       bool            // written to the channel (confirmed is then its confirm's Done)
	confirmed  <-chan struct{} // closed at its confirm (ack or nack)
	returned   bool
	read       bool // its publisher read the outcome (or it was never sent)
	abandoned  bool // its publisher stopped waiting: drop it once its confirm came
	superseded bool // confirmed, and a later publish with fp holds live[fp] now
}

// isConfirmed reports whether e was sent and its confirm came.
func (e *returnable) isConfirmed() bool { return e.sent && isClosed(e.confirmed) }

// returnQueue is one channel's bookkeeping of its mandatory publishes in
// flight, so that a basic.return is credited to exactly the publish that
// caused it. The broker returns a message by routing key and properties
// only, so the queue keeps at most one publish per fingerprint on the
// channel (a second one waits), numbers publishes in the order they are
// sent, and forgets them from the head once their outcome is read. It is
// not safe for concurrent use: pubChannel guards it with its mu.
type returnQueue struct {
	// live is the number of the mandatory publish in flight for each
	// fingerprint (in q). It holds numbers, not confirmations, so that a
	// publish costs it three look-ups (add, and the delete when the queue
	// forgets it) whatever happens in between.
	live map[fingerprint]uint64
	q    []returnable // in the order sent; q[0] is number base
	arr  []returnable // q's array, from its start: reused, so a steady flow allocates nothing
	base uint64
}

// add numbers a mandatory publish about to be queued for sending (ok),
// unless a publish with the same fingerprint is still on the channel: then
// it returns a channel that closes when that one is confirmed (nil while
// it is not sent yet), and numbers nothing.
func (rq *returnQueue) add(fp fingerprint) (seq uint64, busy <-chan struct{}, ok bool) {
	if rq.live == nil {
		rq.live = map[fingerprint]uint64{}
	}
	if old, found := rq.live[fp]; found && old >= rq.base {
		e := &rq.q[old-rq.base]
		if !e.isConfirmed() { // being sent, or in flight
			return 0, e.confirmed, false
		}
		e.superseded = true // confirmed; its caller has yet to read it
	}
	if len(rq.q) == cap(rq.q) { // no room after the tail
		if cap(rq.arr) > 0 && len(rq.q) <= cap(rq.arr)/2 {
			n := copy(rq.arr, rq.q) // move to the front
			clear(rq.arr[n:])
			rq.q = rq.arr[:n]
		} else {
			rq.arr = make([]returnable, max(16, 2*len(rq.q)))
			n := copy(rq.arr, rq.q)
			rq.q = rq.arr[:n]
		}
	}
	rq.q = append(rq.q, returnable{fp: fp})
	seq = rq.base + uint64(len(rq.q)) - 1
	rq.live[fp] = seq
	return seq, nil, true
}

// sent records that publish seq was written; confirmed closes at its
// confirm.
func (rq *returnQueue) sent(seq uint64, confirmed <-chan struct{}) {
	e := &rq.q[seq-rq.base]
	e.sent, e.confirmed = true, confirmed
}

// unsent records that publish seq's write failed: it was never sent, so
// it frees its fingerprint now (and was never superseded).
func (rq *returnQueue) unsent(seq uint64) {
	delete(rq.live, rq.q[seq-rq.base].fp)
}

// read reports whether publish seq was returned, now that its outcome is
// read, and lets the queue forget it. freed says a publish never sent left
// the queue: one waiting for its fingerprint may go on.
func (rq *returnQueue) read(seq uint64) (returned, freed bool) {
	e := &rq.q[seq-rq.base]
	e.read = true
	if !e.sent { // never sent: free its fingerprint, unless unsent already freed it for another
		if cur, ok := rq.live[e.fp]; ok && cur == seq {
			delete(rq.live, e.fp)
		}
		freed = true
	}
	returned = e.returned
	rq.trim()
	return returned, freed
}

// abandon marks publish seq as no longer awaited (its context ended). It
// stays queued until its confirm came: a return may still come for it, and
// must not be taken for a later publish's.
func (rq *returnQueue) abandon(seq uint64) {
	rq.q[seq-rq.base].abandoned = true
	rq.trim()
}

// trim drops the publishes at the head of the queue that are done with:
// read, or abandoned and confirmed (or never sent).
func (rq *returnQueue) trim() {
	n := 0
	for n < len(rq.q) {
		e := &rq.q[n]
		if !e.read && !(e.abandoned && (!e.sent || isClosed(e.confirmed))) {
			break
		}
		n++
	}
	if n == 0 {
		return
	}
	for i := range n {
		if e := &rq.q[i]; e.sent && !e.superseded {
			delete(rq.live, e.fp)
		}
	}
	clear(rq.q[:n]) // let go of the confirmations
	rq.q = rq.q[n:]
	rq.base += uint64(n)
	if len(rq.q) == 0 {
		rq.q = rq.arr[:0]
	}
}

// returned marks the oldest publish in flight with fp that was neither
// returned nor confirmed yet: the broker returns publishes in the order
// they were sent, and a publish's return comes before its ack, so one
// whose confirm came (its goroutine has yet to read it) is not the one.
// Every publish but the one being sent has been recorded sent (the writer
// records it before the next publish).
func (rq *returnQueue) returned(fp fingerprint) {
	for i := range rq.q {
		e := &rq.q[i]
		if e.fp != fp || e.returned || e.read || e.isConfirmed() {
			continue
		}
		e.returned = true
		return
	}
}

// isClosed reports whether c is closed (a nil c never is).
func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// isDone reports whether dc's confirm came.
func isDone(dc *amqp.DeferredConfirmation) bool { return isClosed(dc.Done()) }
