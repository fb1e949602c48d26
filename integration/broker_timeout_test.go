//go:build integration

package integration

// consumer_timeout (30 min by default) on a node of the test's own whose
// timeout is 2 s (scripts/timeoutnode.sh: ctimeout@localhost, AMQP 5698,
// from the suite's installation), started by the test and torn down after;
// the shared brokers keep their default. What the broker does when a
// delivery is held past it differs: up to 4.2 it closes the channel
// (PRECONDITION_FAILED); 4.3 may do that too, or cancel the one consumer
// (basic.cancel) and keep the channel (both seen on 4.3.6). Either way the
// delivery goes back to the queue, and the consumer reads a cancel of a
// queue that still exists as the broker taking its deliveries back.

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/internal/testenv"
	"github.com/acemq/acemq-go/middleware"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/retry"
	"github.com/acemq/acemq-go/topology"
)

const (
	timeoutNodeURL = "amqp://guest:guest@127.0.0.1:5698/"
	timeoutNodeTTL = 2 * time.Second // the node's consumer_timeout

	// eventConsumerInterrupted is the consumer's log event when its
	// subscription ends under it (mq logs it; it has no constant).
	eventConsumerInterrupted = "acemq.consumer.interrupted"
)

// ownNode starts a node of the test's own with scripts/<script> up
// (bounded in time; a node that does not come up fails the test) and tears
// it down when the test ends, pass or fail. The scripts run the node from
// the suite's installation (scripts/node-lib.sh).
func ownNode(t *testing.T, script string) {
	t.Helper()
	run := func(arg string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "../scripts/"+script, arg)
		cmd.WaitDelay = 10 * time.Second
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := run("up")
	t.Cleanup(func() {
		if out, err := run("down"); err != nil {
			t.Errorf("scripts/%s down: %v\n%s", script, err, out)
		}
	})
	if err != nil {
		t.Fatalf("scripts/%s up: %v\n%s", script, err, out)
	}
	t.Logf("%s", strings.TrimSpace(out))
}

// A delivery waiting in-process longer than the broker's consumer_timeout
// is taken back by the broker; the consumer loses nothing: the message
// comes back, resumes at its next attempt (the wait it was cut out of
// counts as used) and is handled. A policy whose in-process limit is below
// the timeout sends the same wait through a broker rung instead, and the
// broker never takes anything back: the copy that comes home carries no
// x-delivery-count.
func TestBrokerConsumerTimeout(t *testing.T) {
	ownNode(t, "timeoutnode.sh")
	testenv.NoLeaks(t) // after the node's cleanup is registered: checked before it runs

	cases := map[string]struct {
		policy   retry.Policy
		takeBack bool // whether the broker takes the delivery back
	}{
		"in-process wait past the timeout": {policy: retry.Waits(3 * timeoutNodeTTL), takeBack: true},
		"the same wait through a rung":     {policy: retry.Waits(3 * timeoutNodeTTL).With(retry.InProcessLimit(timeoutNodeTTL / 2))},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			b, lg := consBroker(t, timeoutNodeURL)
			q := testenv.Name(t)
			// Cleanup on the node itself: testenv's cleanups use the suite's broker.
			t.Cleanup(func() {
				ctx := testenv.Context(t, 20*time.Second)
				for _, n := range append([]string{q, topology.DeadLetterQueue(q), topology.ParkedQueue(q)}, rungNames(q, tc.policy)...) {
					if _, err := b.DeleteQueue(ctx, n); err != nil {
						t.Errorf("delete %s: %v", n, err)
					}
				}
			})
			if err := b.Declare(testenv.Context(t, 20*time.Second), topology.New().Queue(q, topology.Retry(tc.policy), topology.DeadLetter())); err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			var seen []amqp.Table
			var attempts []int
			done := make(chan struct{})
			c, err := b.Consume(testenv.Context(t, 20*time.Second), q, mq.HandlerFunc(func(_ context.Context, d *mq.Delivery) error {
				mu.Lock()
				defer mu.Unlock()
				seen, attempts = append(seen, d.Headers), append(attempts, d.Attempt())
				if d.Attempt() == 1 {
					return errors.New("fails the first time")
				}
				close(done)
				return nil
			}), middleware.Standard(tc.policy))
			if err != nil {
				t.Fatal(err)
			}
			defer testenv.Stop(t, c)
			testenv.Publish(t, b, q, mq.Message{MessageId: "held", Body: []byte("x")})
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				mu.Lock()
				t.Fatalf("not handled to its end within 30 s: attempts %v", attempts)
			}
			testenv.Eventually(t, 10*time.Second, func() bool {
				m, err := testenv.Ready(testenv.Context(t, 5*time.Second), b, q)
				return err == nil && m == 0
			}, "the queue empty")
			mu.Lock()
			defer mu.Unlock()
			v := testenv.BrokerVersion(t)
			// 4.3 cancels the consumer instead of closing the channel; the
			// consumer must read that cancel, on a queue that is still
			// there, as the broker taking its deliveries back.
			if len(attempts) != 2 || attempts[0] != 1 || attempts[1] != 2 {
				t.Errorf("RabbitMQ %v: attempts %v, want [1 2]: the wait the broker cut counts as used, and nothing is handled twice", v, attempts)
			}
			if tc.takeBack && len(lg.All(eventConsumerInterrupted)) == 0 {
				t.Errorf("RabbitMQ %v: no %s after the consumer timeout", v, eventConsumerInterrupted)
			}
			last := seen[len(seen)-1]
			n := headerInt(last, "x-delivery-count")
			// A channel closed for the timeout returns the delivery counted
			// (x-delivery-count 1). 4.3 either does that or cancels the
			// consumer of a quorum queue and keeps the channel (seen both
			// ways on 4.3.6): then the copy comes back when the session
			// gives it up, uncounted.
			if tc.takeBack && n != 1 && (!v.AtLeast(4, 3) || n != -1) {
				t.Errorf("RabbitMQ %v: the copy taken back by the timeout carries x-delivery-count %d, want 1 (or none on 4.3, after a cancel)", v, n)
			}
			if !tc.takeBack && n != -1 {
				t.Errorf("the copy home from the rung carries x-delivery-count %d: the broker took a delivery back", n)
			}
			if m := testenv.Count(t, b, topology.DeadLetterQueue(q)); m != 0 {
				t.Errorf("%d in .dlq", m)
			}
			t.Logf("requeued events: %d; attempts %v; last x-delivery-count %d", len(lg.All(mq.EventRequeued)), attempts, n)
		})
	}
}

// rungNames is the rung queues policy p derives from q.
func rungNames(q string, p retry.Policy) []string {
	var out []string
	for _, r := range p.BrokerRungs() {
		out = append(out, topology.RungQueue(q, r))
	}
	return out
}
