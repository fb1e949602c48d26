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
	dc         *amqp.DeferredConfirmation // set once sent
	returned   bool
	settled    bool // its publisher read the outcome (or it was never sent)
	abandoned  bool // its publisher stopped waiting: drop it once its confirm came
	superseded bool // confirmed, and a later publish with fp holds live[fp] now
}

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
