package mq

// White-box tests of the broker core's pure parts: no broker needed.

import (
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

func TestBrokerErrorLiftsOnlyServerReplies(t *testing.T) {
	server := brokerError("declare queue", &amqp.Error{Code: 406, Reason: "PRECONDITION_FAILED", Server: true})
	if ReplyCode(server) != 406 || !errors.Is(server, ErrPreconditionFailed) {
		t.Errorf("a server reply is not lifted: %#v", server)
	}
	// amqp091-go makes up *amqp.Error values for local failures (501 for a
	// lost socket): not the broker's refusal, so no sentinel matches.
	local := brokerError("declare queue", &amqp.Error{Code: 404, Reason: "made up"})
	var be *BrokerError
	if !errors.As(local, &be) || be.Code != 0 || errors.Is(local, ErrNotFound) {
		t.Errorf("a client-side error counts as a refusal: %#v", local)
	}
	if brokerError("x", nil) != nil {
		t.Error("brokerError(nil) is not nil")
	}
}

func TestChannelLevel(t *testing.T) {
	for code, want := range map[int]bool{311: true, 312: true, 313: true, 403: true, 404: true, 405: true, 406: true,
		320: false, 501: false, 504: false, 530: false, 541: false} {
		if got := channelLevel(&amqp.Error{Code: code}); got != want {
			t.Errorf("channelLevel(%d) = %v; want %v", code, got, want)
		}
	}
	if channelLevel(errors.New("plain")) || channelLevel(amqp.ErrClosed) {
		t.Error("a non-reply error is a channel exception")
	}
	if !channelLevel(fmt.Errorf("channel shutdown error: %w", &amqp.Error{Code: 404})) {
		t.Error("a wrapped 404 is not a channel exception")
	}
}

func TestConfigDefaults(t *testing.T) {
	c := Config{URLs: []string{"amqp://h/"}}.withDefaults()
	if c.Heartbeat != DefaultHeartbeat || c.DialTimeout != DefaultDialTimeout ||
		c.ReconnectMin != DefaultReconnectMin || c.ReconnectMax != DefaultReconnectMax ||
		c.Logger == nil || c.ConnectionName == "" {
		t.Errorf("defaults not applied: %+v", c)
	}
	c = Config{ReconnectMin: time.Minute, ReconnectMax: time.Second}.withDefaults()
	if c.ReconnectMax != time.Minute {
		t.Errorf("ReconnectMax below ReconnectMin is not raised: %v", c.ReconnectMax)
	}
	c = Config{ConnectionName: "svc", Heartbeat: time.Second}.withDefaults()
	if c.ConnectionName != "svc" || c.Heartbeat != time.Second {
		t.Errorf("set values overridden: %+v", c)
	}
}

// The backoff doubles from ReconnectMin up to ReconnectMax, with jitter in
// [d/2, d] so a fleet does not redial in step.
func TestBackoff(t *testing.T) {
	b := New(Config{ReconnectMin: 100 * time.Millisecond, ReconnectMax: 2 * time.Second})
	for n := range 40 {
		want := min(100*time.Millisecond<<min(n, 20), 2*time.Second)
		seen := map[time.Duration]bool{}
		for range 50 {
			d := b.backoff(n)
			if d < want/2 || d > want {
				t.Fatalf("backoff(%d) = %v; want within [%v, %v]", n, d, want/2, want)
			}
			seen[d] = true
		}
		if len(seen) < 10 {
			t.Errorf("backoff(%d) hardly varies: %d distinct values in 50", n, len(seen))
		}
	}
}

func TestMessageDefaults(t *testing.T) {
	before := time.Now()
	m := Message{Body: []byte("x")}
	p := m.publishing()
	if p.DeliveryMode != amqp.Persistent || p.MessageId == "" || p.Timestamp.Before(before) {
		t.Errorf("defaults not applied: %+v", p)
	}
	if m.MessageId != p.MessageId || !m.Timestamp.Equal(p.Timestamp) {
		t.Errorf("the message does not learn its id and timestamp: %+v", m)
	}
	ts := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	m = Message{DeliveryMode: amqp.Transient, MessageId: "mine", Timestamp: ts}
	p = m.publishing()
	if p.DeliveryMode != amqp.Transient || p.MessageId != "mine" || !p.Timestamp.Equal(ts) {
		t.Errorf("set values overridden: %+v", p)
	}
	// A message copied from a delivery travels exactly as it came.
	v := MessageOf(amqp.Delivery{Body: []byte("b"), Headers: amqp.Table{"k": "v"}})
	p = v.publishing()
	if p.DeliveryMode != 0 || p.MessageId != "" || !p.Timestamp.IsZero() || p.Headers["k"] != "v" {
		t.Errorf("a verbatim message got defaults: %+v", p)
	}
}

func TestNewMessageIDUnique(t *testing.T) {
	seen := map[string]bool{}
	for range 100000 {
		id := NewMessageID()
		if seen[id] {
			t.Fatalf("duplicate id %s", id)
		}
		seen[id] = true
	}
}

// add is tryAddLocked on its own, for the tests that play the writer.
func (pc *pubChannel) add(fp fingerprint) (uint64, *amqp.DeferredConfirmation) {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if pc.live == nil {
		pc.live = map[fingerprint]uint64{}
	}
	seq, busy, _ := pc.tryAddLocked(fp)
	return seq, busy
}

// Returns are matched by routing key and message id. Two mandatory
// publishes with the same pair are never in flight on one channel at once
// (the second waits for the first's confirm), so a return is credited to
// exactly the publish that caused it.
func TestReturnCorrelation(t *testing.T) {
	pc := &pubChannel{over: make(chan struct{})}
	inflight := &amqp.DeferredConfirmation{} // never done
	send := func(key, id string) uint64 {
		t.Helper()
		seq, busy := pc.add(fingerprint{key, id})
		if busy != nil {
			t.Fatalf("publish %s/%s refused: another with the same key and id is in flight", key, id)
		}
		pc.sent(seq, inflight)
		return seq
	}
	s1 := send("missing", "a")
	s2 := send("q", "a")
	if _, busy := pc.add(fingerprint{"missing", "a"}); busy != inflight {
		t.Fatal("a second publish with the key and id of one in flight was queued: a return could not be told apart")
	}
	s4 := send("missing", "b")
	returned := func(seq uint64) bool { return pc.q[seq-pc.base].returned }
	pc.onReturn(amqp.Return{RoutingKey: "missing", MessageId: "a"})
	if !returned(s1) || returned(s2) || returned(s4) {
		t.Fatal("the return did not mark the publish with its key and id")
	}
	pc.onReturn(amqp.Return{RoutingKey: "elsewhere", MessageId: "a"}) // nobody's: ignored
	// Settled out of order: the queue forgets only from its head.
	if pc.done(s2) {
		t.Error("publish 2 returned")
	}
	if len(pc.q) != 3 {
		t.Errorf("queue holds %d; want all 3 until the head settles", len(pc.q))
	}
	if !pc.done(s1) || pc.done(s4) {
		t.Error("returned flags wrong")
	}
	if len(pc.q) != 0 || pc.base != 3 || len(pc.live) != 0 {
		t.Errorf("bookkeeping left behind: %d queued, base %d, %d fingerprints", len(pc.q), pc.base, len(pc.live))
	}
	// Settled, the pair is free again.
	s5 := send("missing", "a")
	pc.onReturn(amqp.Return{RoutingKey: "missing", MessageId: "a"})
	if !pc.done(s5) {
		t.Fatal("publish 5 not returned")
	}

	// A publish nobody waits for stays queued (a return may still come
	// for it) until its confirm came, and holds its pair meanwhile.
	s6 := send("q", "c")
	pc.abandon(s6)
	if len(pc.q) != 1 {
		t.Fatal("an abandoned publish in flight was dropped")
	}
	if _, busy := pc.add(fingerprint{"q", "c"}); busy == nil {
		t.Fatal("an abandoned publish in flight released its key and id")
	}
	pc.onReturn(amqp.Return{RoutingKey: "q", MessageId: "c"})
	if !returned(s6) {
		t.Fatal("the return of an abandoned publish went nowhere")
	}

	// A publish never sent (its context ended first) leaves nothing behind.
	pc = &pubChannel{over: make(chan struct{})}
	seq, _ := pc.add(fingerprint{"q", "never"})
	pc.sent(seq, nil)
	pc.done(seq)
	if len(pc.live) != 0 || len(pc.q) != 0 {
		t.Errorf("an unsent publish left %d fingerprints, %d queued", len(pc.live), len(pc.q))
	}

	// A steady flow reuses the queue's array.
	for i := range 10000 {
		seq, _ := pc.add(fingerprint{"q", strconv.Itoa(i)})
		pc.sent(seq, inflight)
		if i%3 == 2 { // three in flight at most
			for s := seq - 2; s <= seq; s++ {
				pc.done(s)
			}
		}
	}
	if cap(pc.arr) > 16 || len(pc.live) != len(pc.q) {
		t.Errorf("the queue's array grew to %d for 3 in flight; %d fingerprints kept", cap(pc.arr), len(pc.live))
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
	seq, _ := pc.add(fingerprint{"k", "id"})
	pc.sent(seq, &amqp.DeferredConfirmation{})
	r := amqp.Return{RoutingKey: "k", MessageId: "id"}
	r1 <- r
	r2 <- r // as amqp091-go's notifyAll does: each listener in turn
	pc.mu.Lock()
	returned := pc.q[seq-pc.base].returned
	pc.mu.Unlock()
	if !returned {
		t.Fatal("the return was not recorded before the second listener took it")
	}
	closes <- &amqp.Error{Code: 404, Reason: "NOT_FOUND - no exchange 'ex'", Server: true}
	close(closes)
	close(r1)
	close(r2)
	<-pc.over
	err := pc.endErr()
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("end by a channel exception: %v; want ErrNotFound", err)
	}
	close(pc.st.lost) // the same, with the connection gone: send again
	if err := pc.endErr(); err != errResend {
		t.Fatalf("end with the connection: %v; want a resend", err)
	}
}

// A channel.open that fails on the socket (the connection is going, the
// supervisor has not seen it yet) waits for the next connection; found by
// the flapping chaos scenario, where three publishes failed with "open
// channel: write: broken pipe".
func TestSocketErrorsMeanTheConnectionIsGoing(t *testing.T) {
	pipe := &net.OpError{Op: "write", Net: "tcp", Err: syscall.EPIPE}
	for _, err := range []error{pipe, fmt.Errorf("wrapped: %w", pipe), io.EOF, net.ErrClosed} {
		if !isNetError(err) {
			t.Errorf("isNetError(%v) = false", err)
		}
	}
	if isNetError(&amqp.Error{Code: amqp.NotAllowed, Reason: "NOT_ALLOWED"}) || isNetError(errors.New("channel id space exhausted")) {
		t.Error("a broker's refusal or a local error taken for a dying socket")
	}
}
