package mq

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"

	amqp "github.com/rabbitmq/amqp091-go"
)

// pubChannel is one channel of a publisher: its writer and waker
// goroutines and its return bookkeeping. Confirms need none: each publish
// is answered by its own deferred confirmation.
type pubChannel struct {
	ch       *amqp.Channel
	st       *conn
	exchange string
	over     chan struct{} // closed when the watcher saw the channel end

	writeKick chan struct{} // something was queued (see writer)
	writeDone chan struct{} // closed when the writer ended
	wakeKick  chan struct{} // something was written (see waker)
	wakeDone  chan struct{} // closed when the waker ended

	wakeMu sync.Mutex
	wakeQ  []*pubReq // written, their callers not yet woken, in the order written

	mu          sync.Mutex
	writeQ      []*pubReq     // queued for the writer, in the order numbered
	writeClosed bool          // the writer ended: nothing more is queued
	wrote       chan struct{} // closed after the writer's current run (see wroteLocked)
	returns     returnQueue   // mandatory publishes in flight
	closeErr    *amqp.Error

	nacks    atomic.Int32 // nacks since the last ack
	nacked   atomic.Bool  // nacked retireAfterNacks times in a row: retire the channel
	inflight atomic.Int64 // sent, answer not yet read
	retiring atomic.Bool  // no new publishes: close when inflight reaches 0
	shut     sync.Once
	broker   *Broker
}

// retireAfterNacks is how many nacks in a row retire a publisher's channel.
// A channel can get stuck nacking (measured on RabbitMQ 3.10: a quorum
// queue whose leader died as the channel first published to it nacked
// every later publish on that channel, while a fresh channel got through);
// a single nack, from a queue that rejects publishes when full, is not
// worth a new channel.
const retireAfterNacks = 2

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

// States of a pubReq. Its caller and pc's writer each move it on with a
// compare-and-swap, so exactly one of them decides whether it is sent.
const (
	reqQueued  int32 = iota // waiting in pc.writeQ
	reqTaken                // the writer is writing it
	reqWritten              // written: dc or err is set
	reqGaveUp               // its caller left before the writer took it: never sent
	reqLeft                 // its caller left while the writer wrote it: the writer finishes it
)

// pubReq is one publish queued on a channel for its writer goroutine.
// Its caller parks once, on done, which is signalled (once) when the
// publish is answered (confirmed, nacked, or its channel ended: dc is done,
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

// reqPool recycles the pubReqs (and their done channels) of answered
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

// enqueue queues r for pc's writer, numbering it among the returnable
// publishes when mandatory, in the order it will be sent. Not queued: wait
// closes once the publish in flight with r's fingerprint is confirmed, or
// once the writer wrote its run (when that publish is queued, not sent
// yet); nil means the writer ended.
func (pc *pubChannel) enqueue(r *pubReq, mandatory bool) (wait <-chan struct{}, ok bool) {
	pc.mu.Lock()
	if pc.writeClosed {
		pc.mu.Unlock()
		return nil, false
	}
	if mandatory {
		seq, busy, ok := pc.returns.add(fingerprint{r.key, r.pub.MessageId})
		if !ok {
			if busy == nil {
				busy = pc.wroteLocked()
			}
			pc.mu.Unlock()
			return busy, false
		}
		r.seq = seq
	}
	pc.writeQ = append(pc.writeQ, r)
	pc.mu.Unlock()
	kick(pc.writeKick)
	return nil, true
}

// enqueueRun queues a batch's run of publishes (rs, in order) as far as it
// can without two equal fingerprints in flight, and returns how many it
// queued; -1 when the writer ended.
func (pc *pubChannel) enqueueRun(rs []*pubReq, mandatory bool) int {
	pc.mu.Lock()
	if pc.writeClosed {
		pc.mu.Unlock()
		return -1
	}
	n := 0
	for _, r := range rs {
		if mandatory {
			seq, _, ok := pc.returns.add(fingerprint{r.key, r.pub.MessageId})
			if !ok {
				break
			}
			r.seq = seq
		}
		pc.writeQ = append(pc.writeQ, r)
		n++
	}
	pc.mu.Unlock()
	if n > 0 {
		kick(pc.writeKick)
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

// sent records publish seq's write (dc nil: it was not sent).
func (pc *pubChannel) sent(seq uint64, dc *amqp.DeferredConfirmation) {
	pc.mu.Lock()
	if dc == nil {
		pc.returns.unsent(seq)
	} else {
		pc.returns.sent(seq, dc.Done())
	}
	pc.mu.Unlock()
}

// wasReturned reports whether publish seq came back with a basic.return,
// now that its outcome is read, and lets the return queue forget it.
func (pc *pubChannel) wasReturned(seq uint64) bool {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	returned, freed := pc.returns.read(seq)
	if freed {
		pc.wakeWroteLocked() // a publish with its fingerprint may wait for it
	}
	return returned
}

// unsent lets the return queue forget publish seq, which was never sent
// (its write failed, or its caller gave up first).
func (pc *pubChannel) unsent(seq uint64) { pc.wasReturned(seq) }

// abandon marks publish seq as no longer awaited (its context ended); see
// returnQueue.abandon.
func (pc *pubChannel) abandon(seq uint64) {
	pc.mu.Lock()
	pc.returns.abandon(seq)
	pc.mu.Unlock()
}

// onReturn credits a basic.return to the publish that caused it.
func (pc *pubChannel) onReturn(r amqp.Return) {
	pc.mu.Lock()
	pc.returns.returned(fingerprint{r.RoutingKey, r.MessageId})
	pc.mu.Unlock()
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
	defer close(pc.writeDone)
	var run []*pubReq
	var sent []*pubReq
	for {
		select {
		case <-pc.writeKick:
		case <-pc.over:
			pc.mu.Lock()
			pc.writeClosed = true
			run, pc.writeQ = pc.writeQ, nil
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
			run, pc.writeQ = pc.writeQ, run[:0]
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
			pc.wakeLater(sent)
			clear(sent)
			pc.mu.Lock()
			pc.wakeWroteLocked()
			pc.mu.Unlock()
		}
	}
}

// writeRun writes run in one go (one write to the socket for the whole
// run, see socket.cork) and returns, appended to sent, the publishes it
// wrote, for the waker.
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
// waker then signals r.done at its confirm); otherwise r.done is signalled
// now. A publish whose caller left mid-write is finished here.
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
			pc.unsent(r.seq)
		}
	}
	if !ok {
		r.signal()
	}
	return ok
}

// wakeLater hands written publishes to the waker.
func (pc *pubChannel) wakeLater(rs []*pubReq) {
	if len(rs) == 0 {
		return
	}
	pc.wakeMu.Lock()
	pc.wakeQ = append(pc.wakeQ, rs...)
	pc.wakeMu.Unlock()
	kick(pc.wakeKick)
}

// waker wakes each publish's caller once its confirmation is done, in
// the order they were written: it waits on the oldest and then wakes every
// one answered by then (a multiple ack answers many at once), so a caller
// parks once per publish and the waker once per run of confirms. When
// the channel ends it wakes every caller at once (their confirmations are
// done as the channel's end reaches amqp091-go's bookkeeping; each caller
// waits for its own then). It ends after the writer, with nobody left to
// wake.
func (pc *pubChannel) waker() {
	defer close(pc.wakeDone)
	var wake []*pubReq
	over := false
	for {
		pc.wakeMu.Lock()
		if len(pc.wakeQ) == 0 {
			pc.wakeMu.Unlock()
			select {
			case <-pc.wakeKick:
			case <-pc.writeDone:
				pc.wakeMu.Lock()
				n := len(pc.wakeQ)
				pc.wakeMu.Unlock()
				if n == 0 {
					return
				}
			}
			continue
		}
		head := pc.wakeQ[0].dc
		pc.wakeMu.Unlock()
		if !over {
			select {
			case <-head.Done():
			case <-pc.over:
				over = true
			}
		}
		pc.wakeMu.Lock()
		n := 0
		for n < len(pc.wakeQ) && (over || isDone(pc.wakeQ[n].dc)) {
			n++
		}
		wake = append(wake[:0], pc.wakeQ[:n]...)
		m := copy(pc.wakeQ, pc.wakeQ[n:])
		clear(pc.wakeQ[m:])
		pc.wakeQ = pc.wakeQ[:m]
		pc.wakeMu.Unlock()
		for _, r := range wake {
			r.signal()
		}
		clear(wake)
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

// endAnswer is what the channel's end says about a publish it did not
// confirm (see judge); the watcher has seen the end.
func (pc *pubChannel) endAnswer() answer {
	pc.mu.Lock()
	e := pc.closeErr
	pc.mu.Unlock()
	return answer{closed: true, end: e, lost: pc.st.isLost()}
}

// count keeps the channel's run of nacks: retireAfterNacks in a row
// retire it.
func (pc *pubChannel) count(k pubKind) {
	switch k {
	case pubConfirmed, pubReturned:
		pc.nacks.Store(0)
	case pubNacked:
		if pc.nacks.Add(1) >= retireAfterNacks {
			pc.nacked.Store(true)
		}
	}
}
