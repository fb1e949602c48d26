//go:build integration

package integration

// The ladder's broker hop on durable rungs against classic ones (issue
// 40): a round of messages each fail their first attempt, hop to the 1 s
// rung, and come home for a second attempt that succeeds. Reported per
// round: hops/s (the first attempts' pace, which each hop's confirm
// gates), the broker's and the client's CPU per hop (the whole round's
// CPU over its hops: the hop, its expiry and dead-letter home, and the
// second delivery), and how late a wait ends past its 1 s (p50, p99).
// "burst" publishes the round at once; "paced" 50 messages a second.
//
//	go test -tags integration -run '^$' -bench BenchmarkRungHop -benchtime 1x ./integration/

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/acemq/acemq-go/internal/testenv"
	"github.com/acemq/acemq-go/middleware"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/retry"
)

func BenchmarkRungHop(b *testing.B) {
	for _, kind := range []string{"classic", "durable"} {
		for _, pace := range []time.Duration{0, 20 * time.Millisecond} {
			name := kind + "/burst"
			if pace > 0 {
				name = kind + "/paced"
			}
			b.Run(name, func(b *testing.B) { benchRungHop(b, kind == "durable", pace) })
		}
	}
}

func benchRungHop(b *testing.B, durable bool, pace time.Duration) {
	const n, wait = 300, time.Second
	opts := []retry.Option{retry.InProcessLimit(0)}
	if durable {
		opts = append(opts, retry.DurableRungs())
	}
	p := retry.Fixed(2, wait, opts...)
	brokerCPU := consBenchBrokerCPU(b)
	brk := testenv.Broker(b, mq.Config{Logger: consBenchInfo})
	pub := brk.Publisher("")
	defer pub.Close()
	var hops, brokerPer, clientPer, p50, p99 []float64
	b.StopTimer()
	for range b.N {
		q := testenv.Queue(b, brk, p)
		var mu sync.Mutex
		failed := map[string]time.Time{}
		var late []time.Duration
		var first, last time.Time
		done := make(chan struct{})
		var cpu0, bcpu0 time.Duration
		h := mq.HandlerFunc(func(_ context.Context, d *mq.Delivery) error {
			now := time.Now()
			mu.Lock()
			defer mu.Unlock()
			if d.Attempt() == 1 {
				if first.IsZero() {
					first, cpu0, bcpu0 = now, testenv.CPU(), brokerCPU()
				}
				last = now
				failed[d.MessageId] = now
				return errors.New("fails once")
			}
			if at, ok := failed[d.MessageId]; ok {
				late = append(late, now.Sub(at)-wait)
				delete(failed, d.MessageId)
				if len(late) == n {
					close(done)
				}
			}
			return nil
		})
		c, err := brk.Consume(testenv.Context(b, time.Minute), q, h, middleware.Standard(p), mq.WithPrefetch(50))
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		msgs := consBenchMessages(n)
		for i := range msgs {
			msgs[i].MessageId = fmt.Sprintf("hop-%d", i)
		}
		if pace == 0 {
			if err := pub.PublishBatch(testenv.Context(b, time.Minute), q, msgs); err != nil {
				b.Fatal(err)
			}
		} else {
			for _, m := range msgs {
				if err := pub.Publish(testenv.Context(b, time.Minute), q, m); err != nil {
					b.Fatal(err)
				}
				time.Sleep(pace)
			}
		}
		select {
		case <-done:
		case <-time.After(2 * time.Minute):
			b.Fatalf("the round did not finish: %d of %d came home", len(late), n)
		}
		b.StopTimer()
		mu.Lock()
		cpu, bcpu := testenv.CPU()-cpu0, brokerCPU()-bcpu0
		span := last.Sub(first)
		slices.Sort(late)
		mu.Unlock()
		if err := c.Stop(testenv.Context(b, 10*time.Second)); err != nil {
			b.Fatal(err)
		}
		if span > 0 {
			hops = append(hops, float64(n)/span.Seconds())
		}
		brokerPer = append(brokerPer, float64(bcpu.Microseconds())/n)
		clientPer = append(clientPer, float64(cpu.Microseconds())/n)
		p50 = append(p50, float64(late[n/2].Milliseconds()))
		p99 = append(p99, float64(late[n*99/100].Milliseconds()))
	}
	mean := func(xs []float64) float64 {
		s := 0.0
		for _, x := range xs {
			s += x
		}
		return s / float64(max(len(xs), 1))
	}
	b.ReportMetric(mean(hops), "hops/s")
	b.ReportMetric(mean(brokerPer), "broker-µs/hop")
	b.ReportMetric(mean(clientPer), "client-µs/hop")
	b.ReportMetric(mean(p50), "late-p50-ms")
	b.ReportMetric(mean(p99), "late-p99-ms")
	b.ReportMetric(0, "ns/op")
}
