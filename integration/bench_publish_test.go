//go:build integration

package integration

// Publishing throughput against raw amqp091-go, same broker, same run:
// 256-byte persistent messages to a durable classic queue on the default
// exchange, confirms on, mandatory set on both sides (the Publisher sets it
// by default on the default exchange, so raw sends the same frames).
//
//	go test -tags integration -run '^$' -bench Publish -benchtime 20000x -count 3 ./integration/
//
// Each reports msgs/s and the client's CPU per message; compare Publish64
// with PublishRaw64 and PublishBatch1000 with PublishRawBatch1000. Those raw
// baselines are the minimal ones (no message id, no timestamp, a sliding
// window that never drains). The ...Same variants do in raw amqp091-go
// exactly the work the library does: the same default properties (message
// id, timestamp) and, for the batch, the same shape (1000 written, then all
// 1000 confirms awaited), so the ratio against them is the library's own
// overhead. Run them interleaved (-count 1 in a loop) on a quiet machine:
// the broker shares it, and throughput follows whatever else it does.

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/internal/testenv"
	"github.com/acemq/acemq-go/mq"
)

var coreBenchBody = make([]byte, 256)

// coreBenchQueue declares a durable classic queue for one benchmark run on
// a raw connection of its own, and deletes it afterwards.
func coreBenchQueue(b *testing.B) string {
	b.Helper()
	conn, err := amqp.Dial(testenv.URL())
	if err != nil {
		b.Fatalf("the broker does not answer: %v", err)
	}
	ch, err := conn.Channel()
	if err != nil {
		b.Fatal(err)
	}
	q := testenv.Name(b)
	if _, err := ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if _, err := ch.QueueDelete(q, false, false, false); err != nil {
			b.Errorf("delete %s: %v", q, err)
		}
		_ = conn.Close()
	})
	return q
}

func coreRawChannel(b *testing.B) *amqp.Channel {
	b.Helper()
	conn, err := amqp.Dial(testenv.URL())
	if err != nil {
		b.Fatalf("the broker does not answer: %v", err)
	}
	b.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		b.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		b.Fatal(err)
	}
	return ch
}

// coreReport reports msgs/s and the client's CPU time per message: the
// broker shares the machine, so throughput moves with whatever else it is
// doing, while CPU per message is the client's own cost.
func coreReport(b *testing.B, cpuStart time.Duration) {
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
	b.ReportMetric(float64((testenv.CPU()-cpuStart).Microseconds())/float64(b.N), "cpu-µs/msg")
}

var coreRawPublishing = amqp.Publishing{DeliveryMode: amqp.Persistent, Body: coreBenchBody}

// Raw amqp091-go, the simplest fair baseline for 64 concurrent publishers:
// one channel in confirm mode shared by 64 goroutines, each publishing and
// waiting for its deferred confirm, so up to 64 are in flight.
func BenchmarkPublishRaw64(b *testing.B) {
	coreRaw64(b, func() amqp.Publishing { return coreRawPublishing })
}

// coreRaw64 publishes with raw amqp091-go from 64 goroutines on one
// channel in confirm mode, each publishing msg() and waiting for its
// deferred confirm, so up to 64 are in flight.
func coreRaw64(b *testing.B, msg func() amqp.Publishing) {
	q := coreBenchQueue(b)
	ch := coreRawChannel(b)
	core64(b, func() error {
		dc, err := ch.PublishWithDeferredConfirm("", q, true, false, msg())
		if err != nil {
			return err
		}
		if !dc.Wait() {
			return errors.New("nacked")
		}
		return nil
	})
}

// core64 times b.N calls of publish, made from 64 goroutines, and reports
// them (coreReport).
func core64(b *testing.B, publish func() error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	cpu := testenv.CPU()
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(b.N) {
				if err := publish(); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	coreReport(b, cpu)
}

// Publisher.Publish from 64 goroutines on one publisher.
func BenchmarkPublish64(b *testing.B) {
	q := coreBenchQueue(b)
	br := testenv.Broker(b, mq.Config{Logger: testenv.Discard()})
	pub := br.Publisher("")
	ctx := context.Background()
	if err := pub.Publish(ctx, q, mq.Message{Body: coreBenchBody}); err != nil { // opens the channel
		b.Fatal(err)
	}
	core64(b, func() error { return pub.Publish(ctx, q, mq.Message{Body: coreBenchBody}) })
}

// Raw amqp091-go with up to 1000 publishes in flight: one goroutine, a
// sliding window of deferred confirms (the next publish waits for the one
// 1000 before it).
func BenchmarkPublishRawBatch1000(b *testing.B) {
	q := coreBenchQueue(b)
	ch := coreRawChannel(b)
	const window = 1000
	ring := make([]*amqp.DeferredConfirmation, window)
	b.ResetTimer()
	cpu := testenv.CPU()
	for i := range b.N {
		if dc := ring[i%window]; dc != nil && !dc.Wait() {
			b.Fatal("nacked")
		}
		dc, err := ch.PublishWithDeferredConfirm("", q, true, false, coreRawPublishing)
		if err != nil {
			b.Fatal(err)
		}
		ring[i%window] = dc
	}
	for _, dc := range ring {
		if dc != nil && !dc.Wait() {
			b.Fatal("nacked")
		}
	}
	b.StopTimer()
	coreReport(b, cpu)
}

// Publisher.PublishBatch with 1000-message batches, one after another.
func BenchmarkPublishBatch1000(b *testing.B) {
	q := coreBenchQueue(b)
	br := testenv.Broker(b, mq.Config{Logger: testenv.Discard()})
	pub := br.Publisher("")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := pub.Publish(ctx, q, mq.Message{Body: coreBenchBody}); err != nil {
		b.Fatal(err)
	}
	const size = 1000
	msgs := make([]mq.Message, size)
	for i := range msgs {
		msgs[i] = mq.Message{Body: coreBenchBody}
	}
	b.ResetTimer()
	cpu := testenv.CPU()
	for done := 0; done < b.N; done += size {
		n := min(size, b.N-done)
		if err := pub.PublishBatch(ctx, q, msgs[:n]); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	coreReport(b, cpu)
}

// coreSamePublishing is what Publisher sends for mq.Message{Body: body}:
// persistent, a fresh message id, the current time.
func coreSamePublishing() amqp.Publishing {
	return amqp.Publishing{DeliveryMode: amqp.Persistent, Body: coreBenchBody, MessageId: mq.NewMessageID(), Timestamp: time.Now()}
}

// Raw amqp091-go doing what Publish64 does: 64 goroutines on one channel,
// the library's default properties on every message.
func BenchmarkPublishRaw64Same(b *testing.B) { coreRaw64(b, coreSamePublishing) }

// Raw amqp091-go doing what PublishBatch1000 does: 1000 written, then all
// 1000 confirms awaited, the library's default properties on every message.
func BenchmarkPublishRawBatch1000Same(b *testing.B) {
	q := coreBenchQueue(b)
	ch := coreRawChannel(b)
	const size = 1000
	batch := make([]*amqp.DeferredConfirmation, 0, size)
	b.ResetTimer()
	cpu := testenv.CPU()
	for i := range b.N {
		dc, err := ch.PublishWithDeferredConfirm("", q, true, false, coreSamePublishing())
		if err != nil {
			b.Fatal(err)
		}
		batch = append(batch, dc)
		if len(batch) == size || i == b.N-1 {
			for _, dc := range batch {
				if !dc.Wait() {
					b.Fatal("nacked")
				}
			}
			batch = batch[:0]
		}
	}
	b.StopTimer()
	coreReport(b, cpu)
}
