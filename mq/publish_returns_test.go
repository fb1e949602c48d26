package mq

// White-box tests of the return queue: no broker, no channel.

import (
	"strconv"
	"testing"
)

// confirm stands for one publish's deferred confirmation: confirm() is its
// ack or nack arriving.
type confirm struct{ c chan struct{} }

func newConfirm() *confirm               { return &confirm{c: make(chan struct{})} }
func (c *confirm) done() <-chan struct{} { return c.c }
func (c *confirm) confirm()              { close(c.c) }

// Returns are matched by routing key and message id. Two mandatory
// publishes with the same pair are never in flight on one channel at once
// (the second waits for the first's confirm), so a return is credited to
// exactly the publish that caused it.
func TestReturnCorrelation(t *testing.T) {
	var rq returnQueue
	inflight := newConfirm() // never done
	send := func(key, id string) uint64 {
		t.Helper()
		seq, busy, ok := rq.add(fingerprint{key, id})
		if !ok {
			t.Fatalf("publish %s/%s refused (busy %v): another with the same key and id is in flight", key, id, busy)
		}
		rq.sent(seq, inflight.done())
		return seq
	}
	s1 := send("missing", "a")
	s2 := send("q", "a")
	if _, busy, ok := rq.add(fingerprint{"missing", "a"}); ok || busy != inflight.done() {
		t.Fatal("a second publish with the key and id of one in flight was queued: a return could not be told apart")
	}
	s4 := send("missing", "b")
	returned := func(seq uint64) bool { return rq.q[seq-rq.base].returned }
	rq.returned(fingerprint{"missing", "a"})
	if !returned(s1) || returned(s2) || returned(s4) {
		t.Fatal("the return did not mark the publish with its key and id")
	}
	rq.returned(fingerprint{"elsewhere", "a"}) // nobody's: ignored
	// Read out of order: the queue forgets only from its head.
	if r, _ := rq.read(s2); r {
		t.Error("publish 2 returned")
	}
	if len(rq.q) != 3 {
		t.Errorf("queue holds %d; want all 3 until the head is read", len(rq.q))
	}
	if r1, _ := rq.read(s1); !r1 {
		t.Error("publish 1 not returned")
	}
	if r4, _ := rq.read(s4); r4 {
		t.Error("publish 4 returned")
	}
	if len(rq.q) != 0 || rq.base != 3 || len(rq.live) != 0 {
		t.Errorf("bookkeeping left behind: %d queued, base %d, %d fingerprints", len(rq.q), rq.base, len(rq.live))
	}
	// Read, the pair is free again.
	s5 := send("missing", "a")
	rq.returned(fingerprint{"missing", "a"})
	if r, _ := rq.read(s5); !r {
		t.Fatal("publish 5 not returned")
	}

	// A publish nobody waits for stays queued (a return may still come
	// for it) until its confirm came, and holds its pair meanwhile.
	s6 := send("q", "c")
	rq.abandon(s6)
	if len(rq.q) != 1 {
		t.Fatal("an abandoned publish in flight was dropped")
	}
	if _, busy, ok := rq.add(fingerprint{"q", "c"}); ok || busy == nil {
		t.Fatal("an abandoned publish in flight released its key and id")
	}
	rq.returned(fingerprint{"q", "c"})
	if !returned(s6) {
		t.Fatal("the return of an abandoned publish went nowhere")
	}

	// A publish never sent (its context ended first) leaves nothing behind.
	rq = returnQueue{}
	seq, _, _ := rq.add(fingerprint{"q", "never"})
	rq.unsent(seq)
	if _, freed := rq.read(seq); !freed {
		t.Error("reading a publish never sent did not free its fingerprint's waiters")
	}
	if len(rq.live) != 0 || len(rq.q) != 0 {
		t.Errorf("an unsent publish left %d fingerprints, %d queued", len(rq.live), len(rq.q))
	}

	// A steady flow reuses the queue's array.
	for i := range 10000 {
		seq, _, _ := rq.add(fingerprint{"q", strconv.Itoa(i)})
		rq.sent(seq, inflight.done())
		if i%3 == 2 { // three in flight at most
			for s := seq - 2; s <= seq; s++ {
				rq.read(s)
			}
		}
	}
	if cap(rq.arr) > 16 || len(rq.live) != len(rq.q) {
		t.Errorf("the queue's array grew to %d for 3 in flight; %d fingerprints kept", cap(rq.arr), len(rq.live))
	}
}

// A publish queued and not sent yet holds its fingerprint with nothing to
// wait on (the writer's run is what to wait for); once sent, the one to
// wait on is its confirm.
func TestReturnQueueBusyUntilConfirmed(t *testing.T) {
	var rq returnQueue
	fp := fingerprint{"q", "m"}
	seq, _, _ := rq.add(fp)
	if _, busy, ok := rq.add(fp); ok || busy != nil {
		t.Fatalf("a queued publish's twin: ok %v, busy %v; want refused with nothing to wait on yet", ok, busy)
	}
	c := newConfirm()
	rq.sent(seq, c.done())
	if _, busy, ok := rq.add(fp); ok || busy != c.done() {
		t.Fatalf("a sent publish's twin: ok %v; want refused, waiting on its confirm", ok)
	}
	c.confirm()
	// Confirmed and not yet read: its twin may go, and takes the pair
	// over; the first one's return can no longer come.
	seq2, _, ok := rq.add(fp)
	if !ok {
		t.Fatal("a confirmed publish still holds its key and id")
	}
	if !rq.q[seq-rq.base].superseded || rq.live[fp] != seq2 {
		t.Fatalf("the confirmed publish was not superseded: %+v, live %d", rq.q[seq-rq.base], rq.live[fp])
	}
	rq.returned(fp) // the twin's return: it comes before the twin's ack
	if rq.q[seq-rq.base].returned || !rq.q[seq2-rq.base].returned {
		t.Fatal("a return was credited to a publish already confirmed")
	}
	// Reading the first must not free the pair the twin holds.
	if r, freed := rq.read(seq); r || freed {
		t.Fatalf("the superseded publish read returned %v, freed %v", r, freed)
	}
	if cur, ok := rq.live[fp]; !ok || cur != seq2 {
		t.Fatalf("reading the superseded publish freed its twin's key and id (live %v %d)", ok, cur)
	}
	if r, _ := rq.read(seq2); !r {
		t.Fatal("the twin's return was lost")
	}
	if len(rq.q) != 0 || len(rq.live) != 0 {
		t.Errorf("bookkeeping left behind: %d queued, %d fingerprints", len(rq.q), len(rq.live))
	}
}

// An abandoned publish is dropped once its confirm came and the queue is
// trimmed past it, and not before.
func TestReturnQueueAbandonedLeavesAtItsConfirm(t *testing.T) {
	var rq returnQueue
	c1, c2 := newConfirm(), newConfirm()
	s1, _, _ := rq.add(fingerprint{"q", "1"})
	rq.sent(s1, c1.done())
	s2, _, _ := rq.add(fingerprint{"q", "2"})
	rq.sent(s2, c2.done())
	rq.abandon(s1)
	if len(rq.q) != 2 {
		t.Fatalf("abandoned in flight: %d queued; want 2", len(rq.q))
	}
	c1.confirm()
	rq.read(s2) // any later trim drops the head now that its confirm came
	if len(rq.q) != 0 || len(rq.live) != 0 || rq.base != 2 {
		t.Errorf("after the abandoned one's confirm: %d queued, %d fingerprints, base %d", len(rq.q), len(rq.live), rq.base)
	}
}
