package mq

// White-box tests of a publisher's channel: no broker needed (no writer
// runs; the test plays its part).

import (
	"context"
	"errors"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

func queueOnly() (*Publisher, *pubChannel) {
	p := &Publisher{mandatory: true}
	pc := &pubChannel{over: make(chan struct{}), writeKick: make(chan struct{}, 1)}
	return p, pc
}

// A publish queued behind another with the same routing key and message id
// waits for it to be sent; when the first one's caller gives up before the
// writer took it, it is never sent, and the second goes ahead at once
// rather than wait for a write that is not coming.
func TestQueuedPublishGivingUpFreesItsFingerprint(t *testing.T) {
	p, pc := queueOnly()
	pub := &amqp.Publishing{MessageId: "same"}
	first := newReq(pc, "q", pub)
	if _, ok := pc.enqueue(first, true); !ok {
		t.Fatal("first publish not queued")
	}
	second := newReq(pc, "q", pub)
	wrote, ok := pc.enqueue(second, true)
	if ok || wrote == nil {
		t.Fatalf("second publish with the same fingerprint: queued %v, wait %v; want to wait for the first's write", ok, wrote)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := p.leave(ctx, "q", first)
	if !errors.Is(err, context.Canceled) || first.state.Load() != reqGaveUp {
		t.Fatalf("leaving a queued publish: %v (state %d); want context.Canceled, never sent", err, first.state.Load())
	}
	select {
	case <-wrote:
	case <-time.After(time.Second):
		t.Fatal("the waiting publish was not woken when the first left the queue unsent")
	}
	if _, ok := pc.enqueue(second, true); !ok {
		t.Fatal("the second publish is still refused after the first left unsent")
	}
	// The writer skips the one that left; its body is let go already.
	if first.pub.Body != nil || len(pc.writeQ) != 2 {
		t.Fatalf("queue holds %d (want 2: the writer drops the one that left); its body kept: %v", len(pc.writeQ), first.pub.Body != nil)
	}
}

// A caller that leaves while the writer is writing its publish says the
// message may or may not arrive; the writer then finishes it alone: counted
// landed, and kept in the return queue until its confirm.
func TestLeavingMidWrite(t *testing.T) {
	p, pc := queueOnly()
	r := newReq(pc, "q", &amqp.Publishing{MessageId: "m"})
	if _, ok := pc.enqueue(r, true); !ok {
		t.Fatal("not queued")
	}
	if !r.state.CompareAndSwap(reqQueued, reqTaken) { // the writer takes it
		t.Fatal("the writer could not take it")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := p.leave(ctx, "q", r); !errors.Is(err, context.Canceled) || r.state.Load() != reqLeft {
		t.Fatalf("leaving mid-write: %v (state %d)", err, r.state.Load())
	}
	dc := &amqp.DeferredConfirmation{}
	pc.sent(r.seq, dc)
	if !pc.wrote1(r, dc, nil, true) {
		t.Fatal("a written publish was not handed to the waker")
	}
	if pc.inflight.Load() != 0 {
		t.Errorf("in flight %d after the writer finished the one that left; want 0", pc.inflight.Load())
	}
	if q := pc.returns.q; len(q) != 1 || !q[0].abandoned {
		t.Errorf("the return queue forgot a publish whose confirm may still come: %+v", q)
	}
}

// The watcher records a return before it lets amqp091-go go on (the second
// listener's send completes only then), and keeps the channel's end.
func TestWatcher(t *testing.T) {
	pc := &pubChannel{over: make(chan struct{}), exchange: "ex",
		st: &conn{c: &amqp.Connection{}, lost: make(chan struct{})}}
	closes := make(chan *amqp.Error, 1)
	r1, r2 := make(chan amqp.Return), make(chan amqp.Return)
	go pc.watch(closes, r1, r2)
	pc.mu.Lock()
	seq, _, _ := pc.returns.add(fingerprint{"k", "id"})
	pc.mu.Unlock()
	pc.sent(seq, &amqp.DeferredConfirmation{})
	r := amqp.Return{RoutingKey: "k", MessageId: "id"}
	r1 <- r
	r2 <- r // as amqp091-go's notifyAll does: each listener in turn
	pc.mu.Lock()
	returned := pc.returns.q[seq-pc.returns.base].returned
	pc.mu.Unlock()
	if !returned {
		t.Fatal("the return was not recorded before the second listener took it")
	}
	closes <- &amqp.Error{Code: 404, Reason: "NOT_FOUND - no exchange 'ex'", Server: true}
	close(closes)
	close(r1)
	close(r2)
	<-pc.over
	o := judge(pc.exchange, pc.endAnswer())
	if o.kind != pubRefused || !errors.Is(o.err, ErrNotFound) {
		t.Fatalf("end by a channel exception: %v %v; want refused with ErrNotFound", o.kind, o.err)
	}
	close(pc.st.lost) // the same, with the connection gone: send again
	if o := judge(pc.exchange, pc.endAnswer()); o.kind != pubResend {
		t.Fatalf("end with the connection: %v %v; want a resend", o.kind, o.err)
	}
}
