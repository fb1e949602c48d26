//go:build integration

package integration

// A real service's day: a consumer of a misspelled queue declares nothing,
// the health check follows the consumers, publishers provided by the fx
// module outlive the consumers at stop, and a consumer whose queue nobody
// declares fails the app's start naming it.

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/fx"

	"github.com/acemq/acemq-go/fxmodule"
	"github.com/acemq/acemq-go/internal/testenv"
	"github.com/acemq/acemq-go/middleware"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/retry"
	"github.com/acemq/acemq-go/topology"
)

var servicePolicy = retry.Exponential(4, 10*time.Second) // rungs 40s

func noopHandler(context.Context, *mq.Delivery) error { return nil }

// A Consume on a queue that does not exist fails, and declares nothing for
// it: no <q>.dlq, no <q>.parked, no rung.
func TestConsumeMissingQueueDeclaresNothing(t *testing.T) {
	testenv.NoLeaks(t)
	b := testenv.Broker(t, mq.Config{})
	q := testenv.Name(t, "misspelled")
	testenv.CleanupDerived(t, q, servicePolicy)
	_, err := b.Consume(testenv.Context(t, 15*time.Second), q, mq.HandlerFunc(noopHandler), middleware.Standard(servicePolicy))
	if !errors.Is(err, mq.ErrNotFound) || !strings.Contains(err.Error(), q) {
		t.Fatalf("Consume on a missing queue: %v, want ErrNotFound naming %s", err, q)
	}
	ctx := testenv.Context(t, 15*time.Second)
	for _, derived := range []string{topology.DeadLetterQueue(q), topology.ParkedQueue(q), topology.RungQueue(q, 40*time.Second)} {
		ok, err := b.QueueExists(ctx, derived)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			t.Errorf("%s was declared for a queue that does not exist", derived)
		}
	}
}

// Broker.Check and ReadyHandler: ready with the consumer subscribed; not
// ready, naming the consumer, once its queue is deleted under it.
func TestHealthFollowsTheConsumers(t *testing.T) {
	testenv.NoLeaks(t)
	b := testenv.Broker(t, mq.Config{})
	q := testenv.Queue(t, b, servicePolicy)
	ctx := testenv.Context(t, 20*time.Second)
	if err := b.Check(ctx); err != nil {
		t.Fatalf("Check with no consumers: %v", err)
	}
	c, err := b.Consume(ctx, q, mq.HandlerFunc(noopHandler), middleware.Standard(servicePolicy))
	if err != nil {
		t.Fatal(err)
	}
	defer testenv.Stop(t, c)
	probe := func() (int, string) {
		rec := httptest.NewRecorder()
		fxmodule.ReadyHandler(b).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		return rec.Code, rec.Body.String()
	}
	if code, body := probe(); code != http.StatusOK || body != "ready\n" {
		t.Fatalf("readyz with the consumer subscribed: %d %q", code, body)
	}
	if _, err := b.DeleteQueue(ctx, q); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, func() bool { return b.Check(ctx) != nil }, "Check still passes with the queue deleted")
	err = b.Check(ctx)
	if !errors.Is(err, mq.ErrNotReady) || !strings.Contains(err.Error(), `not subscribed: consumer of "`+q+`"`) {
		t.Fatalf("Check with the queue deleted: %v", err)
	}
	if code, body := probe(); code != http.StatusServiceUnavailable || !strings.Contains(body, q) {
		t.Fatalf("readyz with the queue deleted: %d %q", code, body)
	}
}

// A consumer whose queue the merged topology does not declare and the
// broker does not have fails the app's start naming it, before anything
// is declared.
func TestFxConsumerOfAnUndeclaredQueue(t *testing.T) {
	testenv.NoLeaks(t)
	declared, missing := testenv.Name(t, "declared"), testenv.Name(t, "missing")
	testenv.CleanupDerived(t, declared, servicePolicy)
	testenv.CleanupDerived(t, missing, servicePolicy)
	app := fxApp(t, fxConfig(t),
		fxmodule.AsTopology(topology.New().Queue(declared, topology.Retry(servicePolicy))),
		fxmodule.AsConsumer(func() fxmodule.Consumer {
			return fxmodule.Consumer{Queue: declared, Handler: mq.HandlerFunc(noopHandler), Standard: true}
		}),
		fxmodule.AsConsumer(func() fxmodule.Consumer {
			return fxmodule.Consumer{Queue: missing, Handler: mq.HandlerFunc(noopHandler), Options: []mq.ConsumerOption{middleware.Standard(servicePolicy)}}
		}))
	err := app.Start(testenv.Context(t, 15*time.Second))
	if err == nil {
		_ = app.Stop(testenv.Context(t, 15*time.Second))
		t.Fatal("the app started with a consumer of a queue nobody declares")
	}
	if !errors.Is(err, mq.ErrNotFound) || !strings.Contains(err.Error(), `"`+missing+`"`) || strings.Contains(err.Error(), `"`+declared+`"`) {
		t.Fatalf("start: %v, want ErrNotFound naming %s only", err, missing)
	}
	b := testenv.Broker(t, mq.Config{})
	ctx := testenv.Context(t, 15*time.Second)
	for _, q := range []string{declared, topology.DeadLetterQueue(missing)} {
		if ok, err := b.QueueExists(ctx, q); err != nil || ok {
			t.Errorf("%s exists (%v): start declared before checking", q, err)
		}
	}
}

type serviceEvents interface{ mq.Sender }

// A handler still draining at stop publishes through the module's
// publisher: publishers close after the consumers. The policy is taken
// from the topology.
func TestFxPublisherOutlivesTheConsumers(t *testing.T) {
	testenv.NoLeaks(t)
	in, out := testenv.Name(t, "in"), testenv.Name(t, "out")
	testenv.CleanupDerived(t, in, servicePolicy)
	testenv.Cleanup(t, out)
	started := make(chan struct{})
	var published error = errors.New("the handler never published")
	var b *mq.Broker
	app := fxApp(t, fxConfig(t),
		fxmodule.AsTopology(topology.New().Queue(in, topology.DeadLetter(), topology.Retry(servicePolicy)).Queue(out)),
		fxmodule.AsPublisher[serviceEvents](""),
		fxmodule.AsConsumer(func(events serviceEvents) fxmodule.Consumer {
			return fxmodule.Consumer{Queue: in, Standard: true, Handler: mq.HandlerFunc(func(ctx context.Context, d *mq.Delivery) error {
				close(started)
				<-d.Draining() // the consumer is stopping
				published = events.Publish(ctx, out, mq.Message{Body: d.Body})
				return published
			})}
		}),
		fx.Populate(&b))
	app.RequireStart()
	fxPublish(t, b, in, "drained")
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the handler was not called")
	}
	app.RequireStop()
	if published != nil {
		t.Fatalf("publish while draining at stop: %v", published)
	}
	check := testenv.Broker(t, mq.Config{})
	if n := testenv.Count(t, check, out); n != 1 {
		t.Fatalf("%d messages in %s, want 1", n, out)
	}
	if ok, _ := check.QueueExists(testenv.Context(t, 10*time.Second), topology.RungQueue(in, 40*time.Second)); !ok {
		t.Errorf("the topology's rung for %s was not declared", in)
	}
}

// refusingSubscriber fails its consumer's subscribe.
type refusingSubscriber struct{ mq.Handler }

var errRefusedForTest = errors.New("refused by the test")

func (refusingSubscriber) Subscribe(context.Context, *mq.Subscription) error {
	return errRefusedForTest
}

// A consumer that fails to start for another reason than a missing queue
// fails start naming it, and the consumers started before it are stopped.
func TestFxConsumerRefusedAtStartStopsTheOthers(t *testing.T) {
	testenv.NoLeaks(t)
	base := testenv.Name(t)
	good, refused := base+".a-good", base+".b-refused" // consumers start in queue order
	testenv.Cleanup(t, good, refused)
	var events fxEvents
	app := fxApp(t, fxConfig(t),
		fxmodule.AsTopology(topology.New().Queue(good, topology.Classic()).Queue(refused, topology.Classic())),
		fxmodule.AsConsumer(func() fxmodule.Consumer {
			return fxmodule.Consumer{Queue: refused, Handler: mq.HandlerFunc(noopHandler), Options: []mq.ConsumerOption{mq.WithMiddleware(
				func(next mq.Handler) mq.Handler { return refusingSubscriber{next} })}}
		}),
		fxmodule.AsConsumer(func() fxmodule.Consumer {
			return fxmodule.Consumer{Queue: good, Handler: mq.HandlerFunc(noopHandler), Options: []mq.ConsumerOption{mq.WithMiddleware(
				func(next mq.Handler) mq.Handler { return &fxLifecycleProbe{Handler: next, events: &events} })}}
		}))
	err := app.Start(testenv.Context(t, 15*time.Second))
	if !errors.Is(err, errRefusedForTest) || !strings.Contains(err.Error(), refused) {
		t.Fatalf("start: %v, want the refusal naming %s", err, refused)
	}
	if got := events.String(); got != "subscribe,stop" {
		t.Errorf("the consumer of %s: %s, want subscribe,stop (started, then stopped by the failed start)", good, got)
	}
	_ = app.Stop(testenv.Context(t, 10*time.Second))
}

// Broker.Check follows the connection: a broker alarm (connection.blocked)
// and a lost connection make it fail, naming why; it passes again once the
// alarm clears and the connection and the consumer are back.
func TestHealthFollowsTheConnection(t *testing.T) {
	testenv.NoLeaks(t)
	proxy, url := testenv.Proxy(t)
	b := testenv.Broker(t, mq.Config{URLs: []string{url}})
	q := testenv.Queue(t, b, servicePolicy)
	ctx := testenv.Context(t, 30*time.Second)
	c, err := b.Consume(ctx, q, mq.HandlerFunc(noopHandler), middleware.Standard(servicePolicy))
	if err != nil {
		t.Fatal(err)
	}
	defer testenv.Stop(t, c)
	if err := b.Check(ctx); err != nil {
		t.Fatalf("Check: %v", err)
	}

	proxy.SendBlocked("low on memory")
	testenv.Eventually(t, 5*time.Second, func() bool { return b.Check(ctx) != nil }, "Check passes while the broker blocks publishing")
	if err := b.Check(ctx); !errors.Is(err, mq.ErrNotReady) || !strings.Contains(err.Error(), "blocks publishing (low on memory)") {
		t.Fatalf("Check while blocked: %v", err)
	}
	proxy.SendUnblocked()
	testenv.Eventually(t, 5*time.Second, func() bool { return b.Check(ctx) == nil }, "Check fails after the alarm cleared")

	proxy.Refuse(true)
	proxy.Cut()
	testenv.Eventually(t, 5*time.Second, func() bool { return b.Check(ctx) != nil }, "Check passes with the connection cut")
	err = b.Check(ctx)
	if !errors.Is(err, mq.ErrNotReady) || !strings.Contains(err.Error(), "not connected to") || strings.Contains(err.Error(), "guest:guest") {
		t.Fatalf("Check with the connection cut: %v", err)
	}
	proxy.Refuse(false)
	testenv.Eventually(t, 15*time.Second, func() bool { return b.Check(ctx) == nil }, "Check does not pass again after the reconnect: %v", b.Check(ctx))
}
