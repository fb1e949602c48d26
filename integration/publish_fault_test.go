//go:build integration

package integration

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/internal/testenv"
	"github.com/acemq/acemq-go/mq"
)

// The headline fault test: 10 000 messages from 8 goroutines while
// the connection is cut 3 times. Every publish that returned nil is in the
// queue; duplicates (a message the broker took just before a cut, sent
// again) are allowed and reported.
func TestPublishSurvivesCuts(t *testing.T) {
	direct, b, p, q := coreCutRig(t)
	ctx := testenv.Context(t, 120*time.Second)
	pub := b.Publisher("")

	const total, workers, cuts = 10000, 8, 3
	var (
		next      atomic.Int64
		confirmed = make([]bool, total)
		failures  atomic.Int64
		wg        sync.WaitGroup
	)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= total {
					return
				}
				err := pub.Publish(ctx, q, mq.Message{MessageId: fmt.Sprintf("f-%05d", i), Body: []byte("payload")})
				if err != nil {
					if failures.Add(1) <= 5 {
						t.Errorf("publish %d: %v", i, err)
					}
					continue
				}
				confirmed[i] = true
			}
		}()
	}
	// Cut when the publishers are well under way, spread over the run.
	for c := range cuts {
		at := int64(total * (c + 1) / (cuts + 1))
		for next.Load() < at {
			time.Sleep(2 * time.Millisecond)
		}
		n := p.Cut()
		t.Logf("cut %d at publish %d: %d connection(s)", c+1, at, n)
		if err := b.WaitReady(ctx); err != nil {
			t.Fatalf("no reconnect after cut %d: %v", c+1, err)
		}
	}
	wg.Wait()
	if n := failures.Load(); n > 0 {
		t.Fatalf("%d publishes failed", n)
	}
	if got := p.Accepted(); got != cuts+1 {
		t.Errorf("the proxy saw %d connections; want %d (one per cut, plus the first)", got, cuts+1)
	}

	seen := coreDrain(t, direct, q)
	lost, dups := 0, 0
	for i, ok := range confirmed {
		if !ok {
			continue
		}
		switch n := seen[fmt.Sprintf("f-%05d", i)]; {
		case n == 0:
			if lost++; lost <= 10 {
				t.Errorf("message f-%05d was confirmed but is not in the queue", i)
			}
		case n > 1:
			dups += n - 1
		}
	}
	if lost > 0 {
		t.Fatalf("%d confirmed messages lost", lost)
	}
	t.Logf("%d confirmed, all in the queue; %d duplicates (at least once)", total, dups)
}

// A publish whose confirm is lost in a cut (the broker took the message,
// the ack never came back) is sent again on the next connection and only
// then reported confirmed. After the reconnect, acks and nacks still land
// on the right publish: the new channel's confirm stream starts afresh
// (amqp091-go's Config.Recovery gets this wrong: flaw (2) of issue 3).
func TestPublishConfirmLostInCutIsResent(t *testing.T) {
	direct, b, p, q := coreCutRig(t, "ok")
	ctx := testenv.Context(t, 60*time.Second)
	// Always full, refusing: every publish to it is nacked by the broker.
	full := coreQueue(t, direct, amqp.Table{"x-max-length": int32(0), "x-overflow": "reject-publish"}, "full")
	pub := b.Publisher("")

	// Warm up: the channel's sequence numbers are well past 1.
	for i := range 10 {
		if err := pub.Publish(ctx, q, mq.Message{MessageId: fmt.Sprintf("w-%d", i)}); err != nil {
			t.Fatal(err)
		}
		if err := pub.Publish(ctx, full, mq.Message{}); !errors.Is(err, mq.ErrNacked) {
			t.Fatalf("publish to the full queue: %v; want ErrNacked", err)
		}
	}

	// The broker's answers stop reaching us; the message gets in.
	p.Stall(false, true)
	res := make(chan error, 2)
	go func() { res <- pub.Publish(ctx, q, mq.Message{MessageId: "lost-confirm"}) }()
	go func() {
		err := pub.Publish(ctx, full, mq.Message{MessageId: "lost-nack"})
		if !errors.Is(err, mq.ErrNacked) {
			err = fmt.Errorf("publish to the full queue: %v; want ErrNacked", err)
		} else {
			err = nil
		}
		res <- err
	}()
	testenv.Eventually(t, 5*time.Second, func() bool {
		n, err := testenv.Ready(ctx, direct, q)
		return err == nil && n == 11
	}, "the broker did not take the message")
	select {
	case err := <-res:
		t.Fatalf("a publish returned (%v) while its confirm could not arrive", err)
	case <-time.After(200 * time.Millisecond):
	}
	p.Cut() // the held ack and nack die with the connection
	p.Stall(false, false)
	for range 2 {
		if err := <-res; err != nil {
			t.Fatal(err)
		}
	}

	// After the reconnect: acks and nacks interleaved and concurrent, each
	// on the right publish.
	var wg sync.WaitGroup
	errs := make([]error, 400)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i%2 == 0 {
				errs[i] = pub.Publish(ctx, q, mq.Message{MessageId: fmt.Sprintf("a-%d", i)})
			} else {
				errs[i] = pub.Publish(ctx, full, mq.Message{MessageId: fmt.Sprintf("a-%d", i)})
			}
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if i%2 == 0 && err != nil {
			t.Errorf("publish %d to the queue: %v", i, err)
		}
		if i%2 == 1 && !errors.Is(err, mq.ErrNacked) {
			t.Errorf("publish %d to the full queue: %v; want ErrNacked", i, err)
		}
	}
	seen := coreDrain(t, direct, q)
	if n := seen["lost-confirm"]; n != 2 {
		t.Errorf("the message whose confirm was lost is in the queue %d times; want 2 (taken, then sent again)", n)
	}
	for i := 0; i < len(errs); i += 2 {
		if seen[fmt.Sprintf("a-%d", i)] != 1 {
			t.Errorf("a-%d is in the queue %d times", i, seen[fmt.Sprintf("a-%d", i)])
		}
	}
	if len(seen) != 10+1+len(errs)/2 {
		t.Errorf("the queue holds %d distinct messages; want %d", len(seen), 10+1+len(errs)/2)
	}
}

// A batch in flight when the connection is cut is sent again: every
// message of a batch that returned nil is in the queue.
func TestPublishBatchSurvivesCut(t *testing.T) {
	direct, b, p, q := coreCutRig(t)
	ctx := testenv.Context(t, 60*time.Second)
	pub := b.Publisher("")

	const batches, size = 10, 500
	done := make(chan error, 1)
	var sent atomic.Int64
	go func() {
		for bi := range batches {
			msgs := make([]mq.Message, size)
			for i := range msgs {
				msgs[i] = mq.Message{MessageId: fmt.Sprintf("b-%d-%d", bi, i), Body: []byte("x")}
			}
			if err := pub.PublishBatch(ctx, q, msgs); err != nil {
				done <- fmt.Errorf("batch %d: %w", bi, err)
				return
			}
			sent.Add(1)
		}
		done <- nil
	}()
	for c := range 2 {
		for sent.Load() < int64(3*(c+1)) {
			time.Sleep(time.Millisecond)
		}
		time.Sleep(5 * time.Millisecond) // into the next batch
		p.Cut()
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	seen := coreDrain(t, direct, q)
	dups := 0
	for bi := range batches {
		for i := range size {
			switch n := seen[fmt.Sprintf("b-%d-%d", bi, i)]; {
			case n == 0:
				t.Fatalf("b-%d-%d lost", bi, i)
			case n > 1:
				dups += n - 1
			}
		}
	}
	t.Logf("%d messages in %d batches, none lost, %d duplicates; %d connections", batches*size, batches, dups, p.Accepted())
}

// Many publishers from many goroutines across cuts, each with a context of
// its own: a publish is either confirmed (and in the queue) or fails with
// its context's error; never anything else, never a hang.
func TestPublishShortContextsAcrossCuts(t *testing.T) {
	direct, b, p, q := coreCutRig(t)
	ctx := testenv.Context(t, 60*time.Second)
	pub := b.Publisher("")

	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		confirmed = map[string]bool{}
		timedOut  atomic.Int64
		stop      = make(chan struct{})
	)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				id := fmt.Sprintf("s-%d-%d", w, i)
				pctx, cancel := context.WithTimeout(ctx, time.Duration(20+i%50)*time.Millisecond)
				err := pub.Publish(pctx, q, mq.Message{MessageId: id})
				cancel()
				switch {
				case err == nil:
					mu.Lock()
					confirmed[id] = true
					mu.Unlock()
				case errors.Is(err, context.DeadlineExceeded):
					timedOut.Add(1)
				default:
					t.Errorf("publish %s: %v", id, err)
				}
			}
		}()
	}
	for range 3 {
		time.Sleep(150 * time.Millisecond)
		p.Refuse(true)
		p.Cut()
		time.Sleep(100 * time.Millisecond)
		p.Refuse(false)
	}
	time.Sleep(150 * time.Millisecond)
	close(stop)
	wg.Wait()
	seen := coreDrain(t, direct, q)
	for id := range confirmed {
		if seen[id] == 0 {
			t.Errorf("%s confirmed but not in the queue", id)
		}
	}
	t.Logf("%d confirmed, %d timed out, %d in the queue", len(confirmed), timedOut.Load(), len(seen))
}
