//go:build integration

package integration

// Healthy throughput of the standard stack while 10% of the messages wait
// in-process for their second attempt, against the same stack with none
// waiting, in the same run on the same queue. Both rounds carry the same
// 5000 messages, every tenth one marked; in the waiting round a marked
// message fails its first attempt and waits 100 ms, in the other it
// succeeds at once. Healthy throughput is the unmarked messages per second,
// from the first handler call to the last unmarked message handled, so the
// broker does the same work per round (one delivery and one ack per
// message) and the ratio is what the waits alone cost. Issue 10's goal: at
// least 0.9x — a failing message never holds up a healthy one.
//
//	go test -tags integration -run '^$' -bench BenchmarkLadderWaiting -benchtime 6x ./integration/

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/internal/testenv"
	"github.com/acemq/acemq-go/middleware"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/retry"
	"github.com/acemq/acemq-go/topology"
)

func BenchmarkLadderWaiting(b *testing.B) {
	// Coalesced acks lose most of their gain while deliveries wait: a
	// multiple ack cannot cover a waiting one, so the acks above it go one
	// by one.
	b.Run("coalesced-acks", func(b *testing.B) { benchLadderWaiting(b) })
	// One channel, as before the subscription moved: every ack walks past
	// the waiting deliveries in front of it.
	b.Run("one-channel", func(b *testing.B) { benchLadderWaiting(b, mq.WithMaxWaiting(0)) })
}

func benchLadderWaiting(b *testing.B, opts ...mq.ConsumerOption) {
	const round, failEvery = 5000, 10
	brokerCPU := consBenchBrokerCPU(b)
	brk := testenv.Broker(b, mq.Config{Logger: consBenchInfo})
	p := retry.Exponential(2, 100*time.Millisecond)
	q := testenv.Queue(b, brk, p, topology.Classic())
	filler := testenv.Broker(b, mq.Config{Logger: consBenchInfo})
	pub := filler.Publisher("")
	defer pub.Close()
	fill := func(failing bool) int {
		msgs := consBenchMessages(round)
		healthy := 0
		for i := range msgs {
			if i%failEvery == 0 {
				msgs[i].Headers = amqp.Table{"bench-fail": failing}
				continue
			}
			healthy++
		}
		if err := pub.PublishBatch(testenv.Context(b, time.Minute), q, msgs); err != nil {
			b.Fatalf("fill: %v", err)
		}
		return healthy
	}
	// run consumes one round and returns the wall and CPU time from the
	// first call to the last healthy message handled.
	run := func(failing bool) (time.Duration, time.Duration, time.Duration, int) {
		b.StopTimer()
		healthy := fill(failing)
		runtime.GC()
		b.StartTimer()
		var healthyDone, calls atomic.Int64
		var start time.Time
		var cpu0 time.Duration
		done := make(chan struct{})
		var took, cpu, bcpu time.Duration
		var bcpu0 time.Duration
		h := mq.HandlerFunc(func(_ context.Context, d *mq.Delivery) error {
			if calls.Add(1) == 1 {
				start, cpu0, bcpu0 = time.Now(), testenv.CPU(), brokerCPU()
			}
			if fail, marked := d.Headers["bench-fail"].(bool); marked {
				if fail && d.Attempt() == 1 {
					return errors.New("fails once")
				}
				return nil
			}
			if healthyDone.Add(1) == int64(healthy) {
				took, cpu, bcpu = time.Since(start), testenv.CPU()-cpu0, brokerCPU()-bcpu0
				close(done)
			}
			return nil
		})
		c, err := brk.Consume(testenv.Context(b, time.Minute), q, h, append([]mq.ConsumerOption{middleware.Standard(p), mq.WithPrefetch(100)}, opts...)...)
		if err != nil {
			b.Fatal(err)
		}
		select {
		case <-done:
		case <-time.After(time.Minute):
			b.Fatal("the round did not finish")
		}
		// Let the failing ones finish their second attempt before the stop.
		testenv.Poll(5*time.Second, func() bool { return calls.Load() == int64(round+round/failEvery) || !failing })
		if !failing {
			testenv.Poll(5*time.Second, func() bool { return calls.Load() == int64(round) })
		}
		if err := c.Stop(testenv.Context(b, 10*time.Second)); err != nil {
			b.Fatal(err)
		}
		return took, cpu, bcpu, healthy
	}
	var ratios []float64
	var cleanCPU, waitCPU, cleanBroker, waitBroker time.Duration
	var cleanMsgs, waitMsgs int
	var cleanTook, waitTook time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		var ct, wt, cc, wc, cb, wb time.Duration
		var cn, wn int
		if i%2 == 0 {
			ct, cc, cb, cn = run(false)
			wt, wc, wb, wn = run(true)
		} else {
			wt, wc, wb, wn = run(true)
			ct, cc, cb, cn = run(false)
		}
		cleanBroker, waitBroker = cleanBroker+cb, waitBroker+wb
		cleanTook, waitTook = cleanTook+ct, waitTook+wt
		cleanCPU, waitCPU = cleanCPU+cc, waitCPU+wc
		cleanMsgs, waitMsgs = cleanMsgs+cn, waitMsgs+wn
		ratios = append(ratios, (float64(wn)/wt.Seconds())/(float64(cn)/ct.Seconds()))
	}
	b.StopTimer()
	if n, err := testenv.Ready(testenv.Context(b, 10*time.Second), brk, q); err != nil || n != 0 {
		b.Fatalf("%d messages left in the queue (%v)", n, err)
	}
	slices.Sort(ratios)
	b.ReportMetric(float64(cleanMsgs)/cleanTook.Seconds(), "none-waiting-msgs/s")
	b.ReportMetric(float64(waitMsgs)/waitTook.Seconds(), "10%-waiting-healthy-msgs/s")
	b.ReportMetric(ratios[len(ratios)/2], "ratio")
	b.ReportMetric(float64(cleanCPU.Microseconds())/float64(cleanMsgs), "none-waiting-cpu-µs/msg")
	b.ReportMetric(float64(waitCPU.Microseconds())/float64(waitMsgs), "10%-waiting-cpu-µs/healthy-msg")
	b.ReportMetric(float64(cleanBroker.Microseconds())/float64(cleanMsgs), "none-waiting-broker-µs/msg")
	b.ReportMetric(float64(waitBroker.Microseconds())/float64(waitMsgs), "10%-waiting-broker-µs/healthy-msg")
	b.ReportMetric(0, "ns/op")
}
