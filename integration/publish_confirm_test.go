//go:build integration

package integration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/internal/testenv"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/topology"
)

// Mandatory is on by default: on the default exchange a queue that does
// not exist is ErrUnroutable, not a silent drop; on a named exchange, a key
// no queue is bound for. AllowUnroutable turns it off.
func TestPublishUnroutable(t *testing.T) {
	b := testenv.Broker(t, mq.Config{})
	ctx := testenv.Context(t, 10*time.Second)
	q := coreQueue(t, b, nil)

	def := b.Publisher("")
	missing := testenv.Name(t, "missing")
	err := def.Publish(ctx, missing, mq.Message{Body: []byte("lost?")})
	if !errors.Is(err, mq.ErrUnroutable) {
		t.Fatalf("publish to a missing queue: %v; want ErrUnroutable", err)
	}
	if !strings.Contains(err.Error(), missing) {
		t.Errorf("the error does not name the queue: %v", err)
	}
	if err := def.Publish(ctx, q, mq.Message{Body: []byte("fine")}); err != nil {
		t.Fatalf("publish to an existing queue after a return: %v", err)
	}

	ex := testenv.Name(t, "ex")
	testenv.CleanupExchanges(t, ex)
	if err := b.Declare(ctx, topology.New().Exchange(ex, topology.Direct).Queue(q, topology.Classic()).Binding(q, ex, "bound")); err != nil {
		t.Fatal(err)
	}
	mand := b.Publisher(ex, mq.Mandatory())
	if err := mand.Publish(ctx, "unbound", mq.Message{}); !errors.Is(err, mq.ErrUnroutable) {
		t.Errorf("mandatory publish on an unbound key: %v; want ErrUnroutable", err)
	}
	if err := mand.Publish(ctx, "bound", mq.Message{}); err != nil {
		t.Errorf("mandatory publish on a bound key: %v", err)
	}
	// With AllowUnroutable, a named exchange drops what it cannot route, as
	// AMQP says: confirmed, not returned.
	if err := b.Publisher(ex, mq.AllowUnroutable()).Publish(ctx, "unbound", mq.Message{}); err != nil {
		t.Errorf("non-mandatory publish on an unbound key: %v; want nil", err)
	}
	if n, _ := testenv.Ready(ctx, b, q); n != 2 {
		t.Errorf("queue holds %d; want 2", n)
	}
}

// Many goroutines share one publisher, pipelined; every third publish goes
// to a queue that does not exist. Exactly those fail with ErrUnroutable,
// the rest are confirmed and land: returns are correlated to the publish
// that caused them, never to a neighbour.
func TestPublishReturnsCorrelatedUnderConcurrency(t *testing.T) {
	b := testenv.Broker(t, mq.Config{})
	ctx := testenv.Context(t, 60*time.Second)
	q := coreQueue(t, b, nil)
	missing := testenv.Name(t, "missing")
	pub := b.Publisher("")

	const total, workers = 2000, 16
	errs := make([]error, total)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < total; i += workers {
				key := q
				if i%3 == 0 {
					key = missing
				}
				// The same message id on both sides: correlation must not
				// rest on ids alone.
				errs[i] = pub.Publish(ctx, key, mq.Message{MessageId: fmt.Sprintf("m-%d", i/3), Body: []byte("x"),
					Headers: amqp.Table{"i": int32(i)}})
			}
		}()
	}
	wg.Wait()
	want := 0
	for i, err := range errs {
		switch {
		case i%3 == 0 && !errors.Is(err, mq.ErrUnroutable):
			t.Errorf("publish %d to the missing queue: %v; want ErrUnroutable", i, err)
		case i%3 != 0 && err != nil:
			t.Errorf("publish %d to the queue: %v; want nil", i, err)
		case i%3 != 0:
			want++
		}
	}
	if t.Failed() {
		return
	}
	ch, err := b.Channel(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	ds, err := ch.Consume(q, "", true, true, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int32]bool{}
	for len(seen) < want {
		select {
		case d := <-ds:
			i := d.Headers["i"].(int32)
			if i%3 == 0 || seen[i] {
				t.Fatalf("publish %d landed (again?) in the queue", i)
			}
			seen[i] = true
		case <-time.After(5 * time.Second):
			t.Fatalf("%d of %d confirmed publishes in the queue", len(seen), want)
		}
	}
}

// A publish to an exchange that does not exist fails with ErrNotFound,
// promptly: no hang, no endless resending. The publisher recovers for the
// next publish, and other publishers never notice.
func TestPublishMissingExchange(t *testing.T) {
	b := testenv.Broker(t, mq.Config{})
	ctx := testenv.Context(t, 20*time.Second)
	q := coreQueue(t, b, nil)
	missing := testenv.Name(t, "no-such-exchange")
	bad := b.Publisher(missing)
	good := b.Publisher("")

	for i := range 3 {
		var err error
		took := coreElapsed(func() { err = bad.Publish(ctx, "k", mq.Message{Body: []byte("x")}) })
		if !errors.Is(err, mq.ErrNotFound) {
			t.Fatalf("publish #%d to a missing exchange: %v; want ErrNotFound", i+1, err)
		}
		if took > 2*time.Second {
			t.Errorf("publish #%d took %v", i+1, took)
		}
		if !strings.Contains(err.Error(), missing) {
			t.Errorf("the error does not name the exchange: %v", err)
		}
		if err := good.Publish(ctx, q, mq.Message{}); err != nil {
			t.Fatalf("another publisher: %v", err)
		}
	}

	// Concurrent publishes in flight on the channel the refusal kills all
	// get the refusal too: none hangs, none is reported confirmed.
	var wg sync.WaitGroup
	errs := make([]error, 20)
	for i := range errs {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = bad.Publish(ctx, "k", mq.Message{}) }()
	}
	wg.Wait()
	for i, err := range errs {
		if !errors.Is(err, mq.ErrNotFound) {
			t.Errorf("concurrent publish %d: %v; want ErrNotFound", i, err)
		}
	}

	// Once the exchange exists, the same publisher works.
	if err := b.Declare(ctx, topology.New().Exchange(missing, topology.Fanout).Queue(q, topology.Classic()).Binding(q, missing, "")); err != nil {
		t.Fatal(err)
	}
	testenv.CleanupExchanges(t, missing)
	if err := bad.Publish(ctx, "k", mq.Message{}); err != nil {
		t.Fatalf("publish once the exchange exists: %v", err)
	}
}

// A publish whose context ends returns promptly with the context's error,
// wherever it is stuck: waiting for a connection that is not coming back,
// waiting for a confirm on a network gone quiet, or called with a context
// already over.
func TestPublishEndedContextReturnsPromptly(t *testing.T) {
	b, p := coreProxied(t, mq.Config{Heartbeat: 10 * time.Second})
	ctx := testenv.Context(t, 30*time.Second)
	q := coreQueue(t, b, nil)
	pub := b.Publisher("")
	if err := pub.Publish(ctx, q, mq.Message{}); err != nil {
		t.Fatal(err)
	}

	check := func(name string, d time.Duration, want error) {
		t.Helper()
		pctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		var err error
		took := coreElapsed(func() { err = pub.Publish(pctx, q, mq.Message{Body: []byte(name)}) })
		if !errors.Is(err, want) {
			t.Errorf("%s: %v; want %v", name, err, want)
		}
		if took > d+time.Second {
			t.Errorf("%s: returned after %v; the context ended after %v", name, took, d)
		}
		t.Logf("%s: %v after %v", name, err, took.Round(time.Millisecond))
	}

	ended, cancel := context.WithCancel(ctx)
	cancel()
	took := coreElapsed(func() {
		if err := pub.Publish(ended, q, mq.Message{}); !errors.Is(err, context.Canceled) {
			t.Errorf("ended context: %v; want context.Canceled", err)
		}
	})
	if took > 100*time.Millisecond {
		t.Errorf("ended context: returned after %v", took)
	}

	// The network goes quiet: the publish is written, the confirm never
	// comes (heartbeats would notice only after 30 s).
	p.Stall(true, true)
	check("stalled network", 300*time.Millisecond, context.DeadlineExceeded)
	check("stalled network again", 300*time.Millisecond, context.DeadlineExceeded)
	p.Stall(false, false)
	if err := pub.Publish(ctx, q, mq.Message{}); err != nil {
		t.Fatalf("publish after the stall: %v", err)
	}

	// The broker is gone and refuses new connections.
	p.Refuse(true)
	p.Cut()
	testenv.Eventually(t, 5*time.Second, func() bool { return !b.Ready() }, "still Ready")
	check("no connection", 300*time.Millisecond, context.DeadlineExceeded)
	p.Refuse(false)
	if err := pub.Publish(ctx, q, mq.Message{}); err != nil {
		t.Fatalf("publish after the broker came back: %v", err)
	}
}

// A batch reports each message's fate: the unroutable ones by index, the
// rest confirmed and in the queue.
func TestPublishBatchReportsEachMessage(t *testing.T) {
	b := testenv.Broker(t, mq.Config{})
	ctx := testenv.Context(t, 20*time.Second)
	q := coreQueue(t, b, nil)
	pub := b.Publisher("")

	msgs := make([]mq.Message, 500)
	for i := range msgs {
		msgs[i] = mq.Message{MessageId: fmt.Sprintf("b-%d", i), Body: []byte("x")}
	}
	if err := pub.PublishBatch(ctx, q, msgs); err != nil {
		t.Fatalf("PublishBatch: %v", err)
	}
	if n, _ := testenv.Ready(ctx, b, q); n != len(msgs) {
		t.Fatalf("queue holds %d; want %d", n, len(msgs))
	}
	err := pub.PublishBatch(ctx, testenv.Name(t, "missing"), msgs[:10])
	var be *mq.BatchError
	if !errors.As(err, &be) || len(be.Errs) != 10 || !errors.Is(err, mq.ErrUnroutable) {
		t.Fatalf("batch to a missing queue: %v; want a *BatchError of 10 ErrUnroutable", err)
	}
	for i, e := range be.Errs {
		if !errors.Is(e, mq.ErrUnroutable) {
			t.Errorf("message %d: %v", i, e)
		}
	}
	if err := pub.PublishBatch(ctx, q, nil); err != nil {
		t.Fatalf("empty batch: %v", err)
	}
}

// While the broker blocks the connection (connection.blocked: a memory or
// disk alarm, made up here by the proxy so the shared broker is left
// alone), Publish waits, bounded by its context, and goes on once the
// broker unblocks; a cut clears the block with the connection it was on.
func TestPublishWaitsWhileBlocked(t *testing.T) {
	b, p := coreProxied(t, mq.Config{})
	ctx := testenv.Context(t, 30*time.Second)
	q := coreQueue(t, b, nil)
	pub := b.Publisher("")
	if err := pub.Publish(ctx, q, mq.Message{}); err != nil {
		t.Fatal(err)
	}

	p.SendBlocked("low on memory (made up by the test)")
	testenv.Eventually(t, 5*time.Second, func() bool { return testenv.Blocked(b) }, "Check does not report connection.blocked")
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	err := pub.Publish(short, q, mq.Message{})
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "low on memory") {
		t.Fatalf("publish while blocked: %v; want the deadline, with the broker's reason", err)
	}
	res := make(chan error, 1)
	go func() { res <- pub.Publish(ctx, q, mq.Message{MessageId: "waited"}) }()
	select {
	case err := <-res:
		t.Fatalf("publish went through while blocked: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	p.SendUnblocked()
	select {
	case err := <-res:
		if err != nil {
			t.Fatalf("publish after unblocked: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("publish still waiting after connection.unblocked")
	}
	if testenv.Blocked(b) {
		t.Error("Check reports blocked after connection.unblocked")
	}

	// Blocked again, then the connection is lost: the next one starts
	// unblocked, and the waiting publish goes out on it.
	p.SendBlocked("disk alarm (made up)")
	testenv.Eventually(t, 5*time.Second, func() bool { return testenv.Blocked(b) }, "not blocked")
	go func() { res <- pub.Publish(ctx, q, mq.Message{MessageId: "after-cut"}) }()
	time.Sleep(100 * time.Millisecond)
	p.Cut()
	select {
	case err := <-res:
		if err != nil {
			t.Fatalf("publish after the cut: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("publish still waiting after the blocked connection was lost")
	}
	if n, err := testenv.Ready(ctx, b, q); err != nil || n != 3 {
		t.Fatalf("queue holds %d (%v); want 3", n, err)
	}
}
