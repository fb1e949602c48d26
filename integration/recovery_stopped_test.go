//go:build integration

package integration

import (
	"fmt"
	"testing"
	"time"

	"github.com/acemq/acemq-go/internal/testenv"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/topology"
)

// Issue 31, item 10: a reconnect declares again only what a running
// consumer still needs. An auto-delete queue whose consumer was stopped
// (the broker deleted it then) and an exclusive one whose consumer was
// stopped (the broker deleted it with the connection) stay gone after the
// cut: nobody would consume them, and a queue nobody consumes grows for
// ever. An auto-delete queue whose consumer still runs, on the same
// exchange, is declared again and handles what is published after the
// reconnect.
func TestRecoveryStoppedQueuesStayGone(t *testing.T) {
	testenv.NoLeaks(t)
	ctx := testenv.Context(t, 90*time.Second)
	lg := testenv.NewLogRecorder(t)
	proxy, url := testenv.Proxy(t)
	b := testenv.Broker(t, mq.Config{URLs: []string{url}, Logger: lg.Logger(), Heartbeat: 2 * time.Second})
	direct := testenv.Broker(t, mq.Config{Logger: testenv.Discard()})
	ex := testenv.Name(t, "fanout")
	stopped := testenv.Name(t, "stopped")
	stoppedX := topology.InstanceQueue(testenv.Name(t, "stoppedx"))
	running := testenv.Name(t, "running")
	testenv.CleanupExchanges(t, ex)
	testenv.Cleanup(t, stopped, running)
	top := topology.New().Exchange(ex, topology.Fanout).
		Queue(stopped, topology.AutoDelete()).Binding(stopped, ex, "").
		Queue(stoppedX, topology.Exclusive()).Binding(stoppedX, ex, "").
		Queue(running, topology.AutoDelete()).Binding(running, ex, "")
	if err := b.Declare(ctx, top); err != nil {
		t.Fatal(err)
	}
	seen := newRecovSeen()
	c, err := b.Consume(ctx, running, seen.handler())
	if err != nil {
		t.Fatal(err)
	}
	defer testenv.Stop(t, c)
	for _, q := range []string{stopped, stoppedX} {
		sc, err := b.Consume(ctx, q, newRecovSeen().handler())
		if err != nil {
			t.Fatal(err)
		}
		testenv.Stop(t, sc)
	}
	// The broker deletes the auto-delete queue with its last consumer.
	testenv.Eventually(t, 10*time.Second, func() bool {
		ok, err := direct.QueueExists(ctx, stopped)
		return err == nil && !ok
	}, "the broker did not delete %s when its consumer stopped", stopped)

	pub := direct.Publisher(ex)
	defer pub.Close()
	for cut := 1; cut <= 2; cut++ {
		proxy.Cut()
		restored := recovWaitEvent(t, lg, mq.EventConnectionRestored, cut, 15*time.Second)
		ids, _ := recovPublish(t, ctx, pub, "", fmt.Sprintf("after%d", cut), 10)
		if !testenv.Poll(time.Until(restored.Add(3*recovWindow)), func() bool { ok, _ := seen.all(ids); return ok }) {
			t.Fatalf("cut %d: the running consumer's queue did not handle what was published after the reconnect; events: %s", cut, lg.Events())
		}
		// Asked on b's own connection: an exclusive queue is b's.
		for _, q := range []string{stopped, stoppedX} {
			if ok, err := b.QueueExists(ctx, q); err != nil || ok {
				t.Errorf("cut %d: QueueExists(%s) = %v, %v; want false: its consumer was stopped, nobody needs it", cut, q, ok, err)
			}
		}
	}
	for _, rec := range lg.All(mq.EventTopologyRedeclared) {
		if q := rec.Attrs["queue"]; q == stopped || q == stoppedX {
			t.Errorf("%v: a queue whose consumer was stopped was declared again", rec)
		}
	}
	testenv.Stop(t, c)
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// After Close nothing of the Broker's is left holding what the
	// exchange receives.
	for _, q := range []string{stopped, running} {
		if ok, err := direct.QueueExists(ctx, q); err != nil || ok {
			t.Errorf("after Close: QueueExists(%s) = %v, %v; want false", q, ok, err)
		}
	}
}
