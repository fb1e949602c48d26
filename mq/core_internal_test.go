package mq

// White-box tests of the broker core's pure parts: no broker needed.

import (
	"errors"
	"fmt"
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

// Returns are matched by routing key and message id; two publishes in
// flight with the same pair are returned in the order they were sent, so
// the first return marks the first of them.
func TestReturnCorrelation(t *testing.T) {
	pc := &pubChannel{over: make(chan struct{})}
	send := func(key, id string) uint64 {
		seq := pc.add(fingerprint{key, id})
		pc.sent(seq, &amqp.DeferredConfirmation{}) // in flight: never done
		return seq
	}
	s1 := send("missing", "a")
	s2 := send("q", "a")
	s3 := send("missing", "a")
	s4 := send("missing", "b")
	returned := func(seq uint64) bool { return pc.q[seq-pc.base].returned }
	pc.onReturn(amqp.Return{RoutingKey: "missing", MessageId: "a"})
	if !returned(s1) || returned(s2) || returned(s3) || returned(s4) {
		t.Fatal("the first return did not mark the first publish with its key and id")
	}
	pc.onReturn(amqp.Return{RoutingKey: "missing", MessageId: "a"})
	if !returned(s3) || returned(s2) || returned(s4) {
		t.Fatal("the second return did not mark the second publish with its key and id")
	}
	pc.onReturn(amqp.Return{RoutingKey: "elsewhere", MessageId: "a"}) // nobody's: ignored
	// Settled out of order: the queue forgets only from its head.
	if pc.done(s2) {
		t.Error("publish 2 returned")
	}
	if len(pc.q) != 4 {
		t.Errorf("queue holds %d; want all 4 until the head settles", len(pc.q))
	}
	for i, want := range map[uint64]bool{s1: true, s3: true, s4: false} {
		if got := pc.done(i); got != want {
			t.Errorf("publish %d returned = %v; want %v", i, got, want)
		}
	}
	if len(pc.q) != 0 || pc.base != 4 {
		t.Errorf("bookkeeping left behind: %d queued, base %d", len(pc.q), pc.base)
	}

	// A publish nobody waits for stays queued (a return may still come
	// for it) until its confirm came.
	s5 := send("q", "c")
	pc.abandon(s5)
	if len(pc.q) != 1 {
		t.Fatal("an abandoned publish in flight was dropped")
	}
	pc.onReturn(amqp.Return{RoutingKey: "q", MessageId: "c"})
	s6 := send("q", "c")
	pc.onReturn(amqp.Return{RoutingKey: "q", MessageId: "c"})
	if !returned(s5) || !returned(s6) {
		t.Fatal("returns went to the wrong publishes around an abandoned one")
	}
	if !pc.done(s6) {
		t.Fatal("publish 6 not returned")
	}

	// A steady flow reuses the queue's array.
	pc = &pubChannel{over: make(chan struct{})}
	for i := range 10000 {
		seq := pc.add(fingerprint{"q", "x"})
		pc.sent(seq, &amqp.DeferredConfirmation{})
		if i%3 == 2 { // three in flight at most
			for s := seq - 2; s <= seq; s++ {
				pc.done(s)
			}
		}
	}
	if cap(pc.arr) > 16 {
		t.Errorf("the queue's array grew to %d for 3 in flight", cap(pc.arr))
	}
	allocs := testing.AllocsPerRun(1000, func() {
		seq := pc.add(fingerprint{"q", "x"})
		pc.sent(seq, nil)
		pc.done(seq)
	})
	if allocs != 0 {
		t.Errorf("%v allocations per publish", allocs)
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
	seq := pc.add(fingerprint{"k", "id"})
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
