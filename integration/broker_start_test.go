//go:build integration

package integration

import (
	"context"
	"errors"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/acemq/acemq-go/internal/testenv"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/ops"
)

// A broker that is not there fails Start at the context's deadline: not
// before (it keeps trying), not after (it never hangs). The error names the
// URL, redacted, and never the password.
func TestBrokerStartClosedPortFailsAtDeadline(t *testing.T) {
	const secret = "s3cr3t-pw"
	raw := "amqp://guest:" + secret + "@" + testenv.ClosedAddr(t) + "/"
	b := mq.New(mq.Config{URLs: []string{raw}, Logger: testenv.Logger(t),
		ReconnectMin: 20 * time.Millisecond, ReconnectMax: 200 * time.Millisecond})
	defer b.Close(context.Background())

	const deadline = 1500 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	var err error
	took := coreElapsed(func() { err = b.Start(ctx) })
	if err == nil {
		t.Fatal("Start against a closed port succeeded")
	}
	t.Logf("after %v: %v", took.Round(time.Millisecond), err)
	if took < deadline-100*time.Millisecond || took > deadline+time.Second {
		t.Errorf("Start took %v; want about the %v deadline", took, deadline)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("error does not wrap context.DeadlineExceeded: %v", err)
	}
	coreCheckRedacted(t, err.Error(), raw, secret)
	if b.Ready() {
		t.Error("Ready after a failed Start")
	}
}

// A port that accepts TCP and then says nothing (a firewall, a hung node):
// the AMQP handshake is cut at the deadline too.
func TestBrokerStartSilentPeerFailsAtDeadline(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var conns []net.Conn
	var mu sync.Mutex
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c) // held open, never answered
			mu.Unlock()
		}
	}()
	defer func() {
		_ = ln.Close()
		wg.Wait()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
	}()

	const secret = "hunter2"
	raw := "amqp://guest:" + secret + "@" + ln.Addr().String() + "/"
	b := mq.New(mq.Config{URLs: []string{raw}, Logger: testenv.Logger(t)})
	defer b.Close(context.Background())
	const deadline = time.Second
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	took := coreElapsed(func() { err = b.Start(ctx) })
	if err == nil {
		t.Fatal("Start against a silent peer succeeded")
	}
	t.Logf("after %v: %v", took.Round(time.Millisecond), err)
	if took < deadline-100*time.Millisecond || took > deadline+time.Second {
		t.Errorf("Start took %v; want about the %v deadline", took, deadline)
	}
	coreCheckRedacted(t, err.Error(), raw, secret)
}

func coreCheckRedacted(t *testing.T, msg, raw, secret string) {
	t.Helper()
	if strings.Contains(msg, secret) {
		t.Errorf("the error shows the password: %s", msg)
	}
	if red := mq.Redact(raw); !strings.Contains(msg, red) {
		t.Errorf("the error does not name the redacted URL %s: %s", red, msg)
	}
}

// Refused credentials will not get better by trying again: Start fails at
// once, long before its deadline, without showing the password.
func TestBrokerStartWrongCredentialsFailsAtOnce(t *testing.T) {
	u, err := url.Parse(testenv.URL())
	if err != nil {
		t.Fatal(err)
	}
	const secret = "definitely-not-the-password"
	u.User = url.UserPassword("goit-nobody", secret)
	raw := u.String()
	b := mq.New(mq.Config{URLs: []string{raw}, Logger: testenv.Logger(t)})
	defer b.Close(context.Background())
	// RabbitMQ itself takes about 3 s to answer a refused login (measured
	// with raw amqp091-go too); "at once" means one attempt, not a retry
	// loop until the deadline.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	took := coreElapsed(func() { err = b.Start(ctx) })
	if err == nil {
		t.Fatal("Start with wrong credentials succeeded")
	}
	t.Logf("after %v: %v", took.Round(time.Millisecond), err)
	if took > 10*time.Second {
		t.Errorf("Start took %v with refused credentials; want a prompt failure", took)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("refused credentials were retried until the deadline: %v", err)
	}
	if !errors.Is(err, mq.ErrAccessRefused) {
		t.Errorf("errors.Is(err, ErrAccessRefused) is false: %v", err)
	}
	coreCheckRedacted(t, err.Error(), raw, secret)
}

// With several URLs, a dead first one is skipped: Start connects to the
// next, promptly, and the supervisor keeps rotating after a loss.
func TestBrokerStartSkipsDeadURL(t *testing.T) {
	dead := "amqp://guest:guest@" + testenv.ClosedAddr(t) + "/"
	p, live := testenv.Proxy(t)
	b := mq.New(mq.Config{URLs: []string{dead, live}, Logger: testenv.Logger(t), Heartbeat: 2 * time.Second,
		ReconnectMin: 20 * time.Millisecond, ReconnectMax: 200 * time.Millisecond})
	defer b.Close(context.Background())
	ctx := testenv.Context(t, 10*time.Second)
	var err error
	took := coreElapsed(func() { err = b.Start(ctx) })
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	if took > 3*time.Second {
		t.Errorf("Start took %v with a dead first URL", took)
	}
	if !b.Ready() {
		t.Fatal("not Ready after Start")
	}
	// Lost: the supervisor tries the dead URL, then the live one again.
	p.Cut()
	if err := b.WaitReady(ctx); err != nil {
		t.Fatalf("WaitReady after a cut: %v", err)
	}
	testenv.Eventually(t, 5*time.Second, func() bool { return p.Accepted() == 2 && b.Ready() },
		"no reconnect through the live URL (accepted %d)", p.Accepted())
	if _, err := b.QueueExists(ctx, testenv.Name(t)); err != nil {
		t.Fatalf("QueueExists after the reconnect: %v", err)
	}
}

// The supervisor redials after a cut with fresh objects; Ready reports the
// gap and WaitReady waits it out, bounded by its context.
func TestBrokerSupervisorReconnects(t *testing.T) {
	b, p := coreProxied(t, mq.Config{})
	ctx := testenv.Context(t, 20*time.Second)
	if !b.Ready() {
		t.Fatal("not Ready after Start")
	}
	q := coreQueue(t, b, nil)

	// A plain cut: back within well under a second.
	start := time.Now()
	p.Cut()
	if err := b.WaitReady(ctx); err != nil {
		t.Fatalf("WaitReady: %v", err)
	}
	testenv.Eventually(t, 5*time.Second, func() bool { return p.Accepted() == 2 && b.Ready() }, "no reconnect")
	t.Logf("reconnected in %v", time.Since(start).Round(time.Millisecond))

	// A broker that stays away: Ready goes false, WaitReady ends at its
	// deadline, and everything is back once the broker answers again.
	p.Refuse(true)
	p.Cut()
	testenv.Eventually(t, 5*time.Second, func() bool { return !b.Ready() }, "still Ready while the broker refuses")
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	var err error
	took := coreElapsed(func() { err = b.WaitReady(short) })
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) || took > 1300*time.Millisecond {
		t.Fatalf("WaitReady while down: %v after %v; want the deadline after about 300ms", err, took)
	}
	qctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = b.QueueExists(qctx, q)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("QueueExists while down: %v; want the deadline", err)
	}
	p.Refuse(false)
	if err := b.WaitReady(ctx); err != nil {
		t.Fatalf("WaitReady after the broker came back: %v", err)
	}
	if ok, err := b.QueueExists(ctx, q); !ok || err != nil {
		t.Fatalf("QueueExists after the reconnect: %v, %v", ok, err)
	}
	if !b.Ready() {
		t.Fatal("not Ready after the reconnect")
	}
}

// Close ends every goroutine the broker, its publishers and its consumers
// started, including the supervisor's, even right after a reconnect.
func TestBrokerCloseLeavesNoGoroutines(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	func() {
		p, u := testenv.Proxy(t)
		defer p.Close()
		b := mq.New(mq.Config{URLs: []string{u}, Logger: testenv.Discard(), ReconnectMin: 10 * time.Millisecond})
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := b.Start(ctx); err != nil {
			t.Fatalf("Start: %v", err)
		}
		q := coreQueue(t, b, nil)
		pub := b.Publisher("")
		if err := pub.Publish(ctx, q, mq.Message{Body: []byte("x")}); err != nil {
			t.Fatalf("Publish: %v", err)
		}
		c, err := b.Consume(ctx, q, mq.HandlerFunc(func(context.Context, *mq.Delivery) error { return nil }))
		if err != nil {
			t.Fatalf("Consume: %v", err)
		}
		_ = c
		p.Cut()
		if err := b.WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
		if err := pub.Publish(ctx, q, mq.Message{Body: []byte("y")}); err != nil {
			t.Fatalf("Publish after reconnect: %v", err)
		}
		if _, err := b.Channel(ctx); err != nil { // handed out and never closed: Close ends it with the connection
			t.Fatal(err)
		}
		if err := b.Close(ctx); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if err := b.Close(ctx); err != nil {
			t.Fatalf("second Close: %v", err)
		}
		if err := pub.Publish(ctx, q, mq.Message{}); !errors.Is(err, mq.ErrClosed) {
			t.Fatalf("Publish after Close: %v; want ErrClosed", err)
		}
		if _, err := b.QueueExists(ctx, q); !errors.Is(err, mq.ErrClosed) {
			t.Fatalf("QueueExists after Close: %v; want ErrClosed", err)
		}
		if err := b.Start(ctx); !errors.Is(err, mq.ErrClosed) {
			t.Fatalf("Start after Close: %v; want ErrClosed", err)
		}
	}()
}

// Close of a broker whose connection is down (the supervisor is redialling
// a broker that refuses) returns promptly and leaves nothing running.
func TestBrokerCloseWhileReconnecting(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	func() {
		p, u := testenv.Proxy(t)
		defer p.Close()
		b := mq.New(mq.Config{URLs: []string{u}, Logger: testenv.Discard(), ReconnectMin: 50 * time.Millisecond})
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := b.Start(ctx); err != nil {
			t.Fatalf("Start: %v", err)
		}
		pub := b.Publisher("")
		p.Refuse(true)
		p.Cut()
		testenv.Eventually(t, 5*time.Second, func() bool { return !b.Ready() }, "still Ready")
		errc := make(chan error, 1)
		go func() { errc <- pub.Publish(ctx, "goit.nowhere", mq.Message{}) }() // waits for a connection
		time.Sleep(100 * time.Millisecond)
		took := coreElapsed(func() {
			if err := b.Close(ctx); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
		if took > time.Second {
			t.Errorf("Close took %v while reconnecting", took)
		}
		if err := <-errc; !errors.Is(err, mq.ErrClosed) {
			t.Errorf("a Publish waiting for a connection ended with %v; want ErrClosed", err)
		}
	}()
}

// A network that goes quiet (no RST, nothing: only heartbeats would notice,
// after three intervals) must not hold any call past its context: opening a
// channel, inspecting, a publisher's first publish, and Close itself.
func TestBrokerStalledNetworkBoundedByContext(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	func() {
		p, u := testenv.Proxy(t)
		defer p.Close()
		b := mq.New(mq.Config{URLs: []string{u}, Logger: testenv.Logger(t), Heartbeat: 10 * time.Second})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := b.Start(ctx); err != nil {
			t.Fatal(err)
		}
		q := coreQueue(t, b, nil)
		warm := b.Publisher("")
		if err := warm.Publish(ctx, q, mq.Message{}); err != nil {
			t.Fatal(err)
		}
		p.Stall(true, true)

		const d = 300 * time.Millisecond
		calls := []struct {
			name string
			fn   func(context.Context) error
		}{
			{"Channel", func(ctx context.Context) error { _, err := b.Channel(ctx); return err }},
			{"QueueExists", func(ctx context.Context) error { _, err := b.QueueExists(ctx, q); return err }},
			{"ops.Count", func(ctx context.Context) error { _, err := ops.Count(ctx, b, q); return err }},
			{"first Publish of a new publisher", func(ctx context.Context) error {
				return b.Publisher("").Publish(ctx, q, mq.Message{})
			}},
			{"Publish", func(ctx context.Context) error { return warm.Publish(ctx, q, mq.Message{}) }},
		}
		for _, c := range calls {
			cctx, cancel := context.WithTimeout(ctx, d)
			var err error
			took := coreElapsed(func() { err = c.fn(cctx) })
			cancel()
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("%s on a stalled network: %v; want the deadline", c.name, err)
			}
			if took > d+time.Second {
				t.Errorf("%s on a stalled network returned after %v; its context ended after %v", c.name, took, d)
			}
		}
		cctx, cancel2 := context.WithTimeout(ctx, d)
		defer cancel2()
		took := coreElapsed(func() { _ = b.Close(cctx) })
		if took > d+time.Second {
			t.Errorf("Close on a stalled network returned after %v; its context ended after %v", took, d)
		}
		p.Stall(false, false)
	}()
}
