//go:build integration

package integration

import (
	"context"
	"testing"
	"time"

	"github.com/acemq/acemq-go/internal/testenv"
	"github.com/acemq/acemq-go/mq"
)

// Issue 40, field seed 2014027197: a connection the client gives up must
// end with a reset even when the client's kernel holds nothing the peer
// has not acknowledged. Behind a TCP proxy (the field's, a load balancer)
// the proxy acknowledged every byte and may still hold them for a broker
// it cannot reach; a FIN tells it to deliver them once it can (the field's
// relays' given-up publishes reached f3 3.7 s after the heal, behind later
// orders of their keys), a reset to throw them away. A clean close (the
// broker's close-ok read) still ends with a FIN. The proxy here holds the
// broker's answers (Stall toClient), so Close's context ends before the
// close-ok comes and the client gives the connection up; everything the
// client wrote the proxy has read, so the client's kernel holds nothing.
// TestChaosAbandonedConnectionBehindAProxySendsNothingLater (tag chaos)
// shows the late publish itself, with a real cut.
func TestConnectionGivenUpBehindAProxyIsReset(t *testing.T) {
	testenv.NoLeaks(t)
	ctx := testenv.Context(t, time.Minute)
	direct := testenv.Broker(t, mq.Config{})
	q := coreQueue(t, direct, nil)
	proxy, url := testenv.Proxy(t)

	open := func(name string) *mq.Broker {
		b := mq.New(mq.Config{URLs: []string{url}, ConnectionName: testenv.Name(t, name), Logger: testenv.Logger(t)})
		if err := b.Start(ctx); err != nil {
			t.Fatal(err)
		}
		if err := b.Publisher("").Publish(ctx, q, mq.Message{Body: []byte(name)}); err != nil {
			t.Fatal(err)
		}
		return b
	}

	clean := open("clean")
	if err := clean.Close(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	if n := proxy.ClientResets(); n != 0 {
		t.Fatalf("a clean Close ended its connection with a reset (%d); want a FIN after the broker's close-ok", n)
	}

	givenUp := open("given-up")
	proxy.Stall(false, true) // the broker's answers (the close-oks) go nowhere
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	_ = givenUp.Close(cctx) // ends with cctx: the client gives the connection up
	cancel()
	deadline := time.Now().Add(5 * time.Second)
	for proxy.ClientResets() == 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	proxy.Stall(false, false)
	if proxy.ClientResets() != 1 {
		t.Fatalf("the connection Close gave up ended with %d resets; want 1 (a FIN tells a proxy that acknowledged the client's bytes to deliver them once it can: the publishes given up arrive later, behind what was sent since)", proxy.ClientResets())
	}
}
