//go:build integration

package integration

// Helpers of the broker-core and publisher suites (broker_*_test.go,
// publish_*_test.go, bench_publish_test.go). Their names start with core so
// they do not collide with the other suites' helpers in this package.

import (
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/internal/tcpproxy"
	"github.com/acemq/acemq-go/internal/testenv"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/topology"
)

// coreProxied starts a broker whose connection goes through a fresh proxy.
func coreProxied(t testing.TB, cfg mq.Config) (*mq.Broker, *tcpproxy.Proxy) {
	t.Helper()
	p, u := testenv.Proxy(t)
	cfg.URLs = []string{u}
	if cfg.Heartbeat == 0 {
		cfg.Heartbeat = 2 * time.Second
	}
	return testenv.Broker(t, cfg), p
}

// coreQueue declares a durable classic goit.* queue (with extra arguments,
// if given) and deletes it when the test ends.
func coreQueue(t testing.TB, b *mq.Broker, args amqp.Table, suffix ...string) string {
	t.Helper()
	q := testenv.Name(t, suffix...)
	testenv.Cleanup(t, q)
	opts := []topology.QueueOption{topology.Classic()}
	if args != nil {
		opts = append(opts, topology.Args(args))
	}
	if err := b.Declare(testenv.Context(t, 10*time.Second), topology.New().Queue(q, opts...)); err != nil {
		t.Fatalf("declare %s: %v", q, err)
	}
	return q
}

// coreCutRig is the fault tests' setup: a broker straight to the test
// broker, one whose connection goes through a fresh proxy (to cut), and a
// queue (coreQueue) declared through the direct one.
func coreCutRig(t testing.TB, suffix ...string) (direct, b *mq.Broker, p *tcpproxy.Proxy, q string) {
	t.Helper()
	direct = testenv.Broker(t, mq.Config{})
	b, p = coreProxied(t, mq.Config{})
	return direct, b, p, coreQueue(t, direct, nil, suffix...)
}

// coreDrain consumes every message ready in q (auto-ack, on a channel of
// its own) and counts them by message id. Nothing else may consume q.
func coreDrain(t testing.TB, b *mq.Broker, q string) map[string]int {
	t.Helper()
	ctx := testenv.Context(t, 60*time.Second)
	n, err := testenv.Ready(ctx, b, q)
	if err != nil {
		t.Fatalf("count %s: %v", q, err)
	}
	seen := make(map[string]int, n)
	if n == 0 {
		return seen
	}
	ch, err := b.Channel(ctx)
	if err != nil {
		t.Fatalf("channel: %v", err)
	}
	defer ch.Close()
	ds, err := ch.Consume(q, "", true, true, false, false, nil)
	if err != nil {
		t.Fatalf("consume %s: %v", q, err)
	}
	for got := 0; got < n; got++ {
		select {
		case d, ok := <-ds:
			if !ok {
				t.Fatalf("drain %s: channel closed after %d of %d", q, got, n)
			}
			seen[d.MessageId]++
		case <-ctx.Done():
			t.Fatalf("drain %s: only %d of %d messages came", q, got, n)
		}
	}
	return seen
}

// coreElapsed is how long fn took.
func coreElapsed(fn func()) time.Duration {
	start := time.Now()
	fn()
	return time.Since(start)
}
