//go:build integration

package integration

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/internal/testenv"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/retry"
	"github.com/acemq/acemq-go/topology"
)

// coreContractTopology is the contract example's topology (docs/contract.md, "Topology and printout") with goit.* names:
// 3 exchanges, 6 queues, 4 bindings. acemq.dlx and acemq.retry are the
// contract's own shared exchanges; they are declared (idempotently) but
// never deleted, since other suites use them at the same time.
func coreContractTopology(t *testing.T) (top *topology.Topology, exchange string, queues []string) {
	t.Helper()
	exchange = testenv.Name(t, "orders-events")
	q := testenv.Name(t, "shipping.orders")
	top = topology.New().
		Exchange(exchange, topology.Topic).
		Queue(q, topology.DeadLetter(), topology.Retry(retry.Exponential(6, 10*time.Second))).
		Binding(q, exchange, "order.placed")
	queues = []string{q, q + ".dlq", q + ".parked", q + ".retry.40s", q + ".retry.80s", q + ".retry.160s"}
	testenv.Cleanup(t, queues...)
	testenv.CleanupExchanges(t, exchange)
	return top, exchange, queues
}

// docs/contract.md, "Who declares what": a service declares its topology on every boot, so Declare
// is idempotent; everything the printout lists exists afterwards, routed as planned.
func TestBrokerDeclareContractTopologyTwice(t *testing.T) {
	b := testenv.Broker(t, mq.Config{})
	ctx := testenv.Context(t, 30*time.Second)
	top, exchange, queues := coreContractTopology(t)
	plan, err := top.Plan()
	if err != nil {
		t.Fatal(err)
	}
	if len(plan) != 13 {
		t.Fatalf("plan has %d actions; want 3+6+4:\n%v", len(plan), top)
	}
	for i := range 2 {
		if err := b.Declare(ctx, top); err != nil {
			t.Fatalf("declare #%d: %v", i+1, err)
		}
	}
	for _, q := range queues {
		ok, err := b.QueueExists(ctx, q)
		if err != nil || !ok {
			t.Errorf("QueueExists(%s) = %v, %v after declare", q, ok, err)
		}
	}
	// The bindings route: the business key to the source queue, the
	// dead-letter key to .dlq, the home key from acemq.retry back.
	routes := []struct{ exchange, key, queue string }{
		{exchange, "order.placed", queues[0]},
		{topology.DeadLetterExchange, queues[1], queues[1]},
		{topology.DeadLetterExchange, queues[2], queues[2]},
		{topology.RetryExchange, queues[0], queues[0]},
	}
	for _, r := range routes {
		if err := b.Publisher(r.exchange, mq.Mandatory()).Publish(ctx, r.key, mq.Message{Body: []byte("route")}); err != nil {
			t.Errorf("publish to %s on %s: %v", r.exchange, r.key, err)
		}
	}
	counts := map[string]int{}
	for _, r := range routes {
		counts[r.queue]++
	}
	for q, want := range counts {
		if n, err := testenv.Ready(ctx, b, q); err != nil || n != want {
			t.Errorf("ops.Count(%s) = %d, %v; want %d", q, n, err, want)
		}
	}
}

// A conflicting redeclaration is refused with ErrPreconditionFailed naming
// the queue; it kills only its own throwaway channel, so a publisher of the
// same broker publishing all along never notices.
func TestBrokerDeclareConflictLeavesPublisherUnharmed(t *testing.T) {
	b := testenv.Broker(t, mq.Config{})
	ctx := testenv.Context(t, 30*time.Second)
	q := testenv.Name(t, "quorum")
	testenv.Cleanup(t, q)
	if err := b.Declare(ctx, topology.New().Queue(q)); err != nil { // quorum, the default
		t.Fatal(err)
	}
	target := coreQueue(t, b, nil, "target")

	pub := b.Publisher("")
	var (
		sent     atomic.Int64
		pubErr   atomic.Value
		stop     = make(chan struct{})
		wg       sync.WaitGroup
		conflict = make(chan struct{})
		after    atomic.Int64
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := pub.Publish(ctx, target, mq.Message{Body: []byte("keep going")}); err != nil {
				pubErr.Store(err)
				return
			}
			sent.Add(1)
			select {
			case <-conflict:
				after.Add(1)
			default:
			}
		}
	}()
	testenv.Eventually(t, 5*time.Second, func() bool { return sent.Load() >= 20 }, "the publisher did not get going")

	err := b.Declare(ctx, topology.New().Queue(q, topology.Classic()))
	close(conflict)
	if err == nil {
		t.Fatal("redeclaring a quorum queue as classic succeeded")
	}
	t.Logf("refusal: %v", err)
	if !errors.Is(err, mq.ErrPreconditionFailed) {
		t.Errorf("errors.Is(err, ErrPreconditionFailed) is false: %v", err)
	}
	var be *mq.BrokerError
	if !errors.As(err, &be) || be.Code != 406 {
		t.Errorf("want a *BrokerError with code 406; got %#v", err)
	} else if !strings.Contains(be.Op, q) || !strings.Contains(err.Error(), q) {
		t.Errorf("the refusal does not name the queue %s: %v", q, err)
	}
	// Other refusals are not mistaken for it.
	if errors.Is(err, mq.ErrNotFound) || errors.Is(err, mq.ErrAccessRefused) {
		t.Errorf("a 406 matches another sentinel: %v", err)
	}

	testenv.Eventually(t, 5*time.Second, func() bool { return after.Load() >= 20 || pubErr.Load() != nil },
		"the publisher stalled after the refusal")
	close(stop)
	wg.Wait()
	if e := pubErr.Load(); e != nil {
		t.Fatalf("the publisher was harmed by a refused declaration: %v", e)
	}
	n := sent.Load()
	if got, err := testenv.Ready(ctx, b, target); err != nil || int64(got) != n {
		t.Fatalf("target holds %d (%v); the publisher had %d confirmed", got, err, n)
	}
	// The queue is untouched and the broker still declares it as it is.
	if err := b.Declare(ctx, topology.New().Queue(q)); err != nil {
		t.Fatalf("redeclaring as it is after the refusal: %v", err)
	}
	t.Logf("%d publishes confirmed, %d after the refusal", n, after.Load())
}

// A binding to an exchange that does not exist names the binding; an
// invalid topology is refused before the broker sees it.
func TestBrokerDeclareRefusalsAreNamed(t *testing.T) {
	b := testenv.Broker(t, mq.Config{})
	ctx := testenv.Context(t, 10*time.Second)
	q := coreQueue(t, b, nil)

	// Valid for the builder (the exchange is declared by the topology),
	// refused by the broker: an exchange of another kind already exists.
	ex := testenv.Name(t, "ex")
	testenv.CleanupExchanges(t, ex)
	if err := b.Declare(ctx, topology.New().Exchange(ex, topology.Fanout)); err != nil {
		t.Fatal(err)
	}
	err := b.Declare(ctx, topology.New().Exchange(ex, topology.Direct).Queue(q, topology.Classic()).Binding(q, ex, "k"))
	if !errors.Is(err, mq.ErrPreconditionFailed) || !strings.Contains(err.Error(), ex) {
		t.Fatalf("redeclare exchange as another kind: %v; want ErrPreconditionFailed naming %s", err, ex)
	}

	// Invalid: nothing reaches the broker, the builder's error comes back.
	err = b.Declare(ctx, topology.New().Queue(q, topology.Quorum(), topology.Exclusive()))
	if !errors.Is(err, topology.ErrInvalid) {
		t.Fatalf("invalid topology: %v; want topology.ErrInvalid", err)
	}
	if err := b.Declare(ctx, nil); err == nil {
		t.Fatal("Declare(nil) succeeded")
	}
}

// Inspection (docs/contract.md, "Inspection"): QueueExists, ops.Count (ready messages
// only) and DeleteQueue (returns what it deleted).
func TestBrokerInspection(t *testing.T) {
	b := testenv.Broker(t, mq.Config{})
	ctx := testenv.Context(t, 30*time.Second)
	q := coreQueue(t, b, nil)
	missing := testenv.Name(t, "missing")

	if ok, err := b.QueueExists(ctx, q); !ok || err != nil {
		t.Errorf("QueueExists(existing) = %v, %v", ok, err)
	}
	if ok, err := b.QueueExists(ctx, missing); ok || err != nil {
		t.Errorf("QueueExists(missing) = %v, %v; want false, nil", ok, err)
	}
	if n, err := testenv.Ready(ctx, b, missing); !errors.Is(err, mq.ErrNotFound) || !strings.Contains(coreErrText(err), missing) {
		t.Errorf("ops.Count(missing) = %d, %v; want ErrNotFound naming the queue", n, err)
	}

	pub := b.Publisher("")
	for i := range 5 {
		if err := pub.Publish(ctx, q, mq.Message{Body: []byte{byte(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := testenv.Ready(ctx, b, q); n != 5 || err != nil {
		t.Fatalf("ops.Count = %d, %v; want 5", n, err)
	}

	// Hold one delivery unacknowledged on a raw channel: it is not ready,
	// so it is not counted.
	ch, err := b.Channel(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Qos(1, 0, false); err != nil {
		t.Fatal(err)
	}
	ds, err := ch.Consume(q, "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	var held amqp.Delivery
	select {
	case held = <-ds:
	case <-ctx.Done():
		t.Fatal("no delivery")
	}
	testenv.Eventually(t, 5*time.Second, func() bool {
		n, err := testenv.Ready(ctx, b, q)
		return n == 4 && err == nil
	}, "ops.Count does not leave out the unacknowledged delivery")
	// Given back, it counts again.
	if err := held.Nack(false, true); err != nil {
		t.Fatal(err)
	}
	_ = ch.Close()
	testenv.Eventually(t, 5*time.Second, func() bool {
		n, err := testenv.Ready(ctx, b, q)
		return n == 5 && err == nil
	}, "the requeued delivery is not counted again")

	n, err := b.DeleteQueue(ctx, q)
	if n != 5 || err != nil {
		t.Fatalf("DeleteQueue = %d, %v; want 5", n, err)
	}
	if ok, err := b.QueueExists(ctx, q); ok || err != nil {
		t.Fatalf("QueueExists after DeleteQueue = %v, %v", ok, err)
	}
	if n, err := b.DeleteQueue(ctx, missing); n != 0 || err != nil {
		t.Fatalf("DeleteQueue(missing) = %d, %v; want 0, nil", n, err)
	}
}

// A failure other than NOT_FOUND is an error, not "does not exist": here an
// exclusive queue owned by another connection (RESOURCE_LOCKED), and a
// context that ends.
func TestBrokerQueueExistsOtherErrors(t *testing.T) {
	b := testenv.Broker(t, mq.Config{})
	ctx := testenv.Context(t, 10*time.Second)

	other, err := amqp.Dial(testenv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	och, err := other.Channel()
	if err != nil {
		t.Fatal(err)
	}
	q := testenv.Name(t, "exclusive")
	if _, err := och.QueueDeclare(q, false, true, true, false, nil); err != nil {
		t.Fatal(err)
	}
	ok, err := b.QueueExists(ctx, q)
	if err == nil {
		t.Fatalf("QueueExists on another connection's exclusive queue = %v, nil; want an error", ok)
	}
	t.Logf("exclusive queue: %v", err)
	if errors.Is(err, mq.ErrNotFound) || func() bool { be, ok := errors.AsType[*mq.BrokerError](err); return !ok || be.Code != 405 }() || !errors.Is(err, mq.ErrAccessRefused) {
		t.Errorf("want RESOURCE_LOCKED (405), matching ErrAccessRefused; got %v", err)
	}
	if !strings.Contains(err.Error(), q) {
		t.Errorf("the error does not name the queue: %v", err)
	}
	// The broker is fine afterwards: only the throwaway channel died.
	if ok, err := b.QueueExists(ctx, testenv.Name(t)); ok || err != nil {
		t.Errorf("QueueExists after the refusal = %v, %v", ok, err)
	}

	ended, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := b.QueueExists(ended, q); !errors.Is(err, context.Canceled) {
		t.Errorf("QueueExists with an ended context: %v; want context.Canceled", err)
	}
}

func coreErrText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
