//go:build integration

package integration

// Issue 22 item 7: every ops call returns by its context, also when the
// network goes quiet under it (amqp091's calls, Channel.Close among them,
// wait for a broker that no longer answers until the heartbeat gives the
// connection up, 15 s and more).

import (
	"context"
	"testing"
	"time"

	"github.com/acemq/acemq-go/internal/testenv"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/ops"
)

func TestOpsReturnByTheirContext(t *testing.T) {
	testenv.NoLeaks(t)
	direct := testenv.Broker(t, mq.Config{})
	q, dlq, _ := opsSetup(t, direct)
	testenv.Publish(t, direct, dlq, opsDeadLetters(q, 200)...)
	testenv.WaitCount(t, direct, dlq, 200, 10*time.Second)
	const (
		basic        = 60
		basicGet     = 70
		basicConsume = 20
		queueClass   = 50
		queuePurge   = 30
		queueDeclare = 10
	)
	none := ops.Filter{MessageId: "no-such-id"}
	for _, tc := range []struct {
		name          string
		class, method uint16 // the proxy stalls once the client sent this
		after         int64  // many times (beyond what it had sent before)
		call          func(context.Context, *mq.Broker) error
	}{
		{"Peek", basic, basicGet, 10, func(ctx context.Context, b *mq.Broker) error { _, err := ops.Peek(ctx, b, dlq, 200); return err }},
		{"PeekMatching", basic, basicGet, 10, func(ctx context.Context, b *mq.Broker) error {
			_, err := ops.PeekMatching(ctx, b, dlq, 1, none)
			return err
		}},
		{"Delete", basic, basicGet, 10, func(ctx context.Context, b *mq.Broker) error { _, err := ops.Delete(ctx, b, dlq, none); return err }},
		{"Replay", basic, basicGet, 10, func(ctx context.Context, b *mq.Broker) error {
			_, err := ops.Replay(ctx, b, dlq, ops.ReplayOptions{Filter: none})
			return err
		}},
		{"Count", queueClass, queueDeclare, 1, func(ctx context.Context, b *mq.Broker) error { _, err := ops.Count(ctx, b, dlq); return err }},
		{"Purge", queueClass, queuePurge, 1, func(ctx context.Context, b *mq.Broker) error {
			_, err := ops.Purge(ctx, b, testenv.Name(t, "missing")) // stalls at the passive declare
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			proxy, url := testenv.Proxy(t)
			b := testenv.Broker(t, mq.Config{URLs: []string{url}, Logger: testenv.Discard()})
			if tc.class == queueClass && tc.method == queuePurge {
				tc.method = queueDeclare
			}
			base := proxy.Sent(tc.class, tc.method)
			watch := make(chan struct{})
			go func() {
				defer close(watch)
				for proxy.Sent(tc.class, tc.method) < base+tc.after {
					time.Sleep(time.Millisecond)
				}
				proxy.Stall(true, true)
			}()
			const bound = 2 * time.Second
			ctx, cancel := context.WithTimeout(context.Background(), bound)
			defer cancel()
			began := time.Now()
			err := tc.call(ctx, b)
			took := time.Since(began)
			<-watch
			if took > bound+time.Second {
				t.Errorf("%s on a stalled network, cancelled after %v: returned after %v (%v)", tc.name, bound, took.Round(100*time.Millisecond), err)
			} else {
				t.Logf("%s returned after %v: %v", tc.name, took.Round(10*time.Millisecond), err)
			}
			proxy.Stall(false, false)
			proxy.Cut()
		})
	}
	testenv.WaitCount(t, direct, dlq, 200, 30*time.Second)
}
