package mq

// White-box tests of the broker core's pure parts: no broker needed.

import (
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

func TestBrokerErrorLiftsOnlyServerReplies(t *testing.T) {
	server := brokerError("declare queue", &amqp.Error{Code: 406, Reason: "PRECONDITION_FAILED", Server: true})
	if be, ok := errors.AsType[*BrokerError](server); !ok || be.Code != 406 || !errors.Is(server, ErrPreconditionFailed) {
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
	if c.Heartbeat != defaultHeartbeat || c.DialTimeout != defaultDialTimeout ||
		c.ReconnectMin != defaultReconnectMin || c.ReconnectMax != defaultReconnectMax ||
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
