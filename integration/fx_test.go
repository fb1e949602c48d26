//go:build integration

package integration

// The fx module against the real broker: start and stop, stop with work in
// flight, start with the broker down, a refused topology, a consumer that
// fails at start or gives up later. Every test checks with goleak that the
// app leaves nothing running. Helpers here start with fx.

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
	"go.uber.org/goleak"

	"github.com/acemq/acemq-go/fxmodule"
	"github.com/acemq/acemq-go/internal/testenv"
	"github.com/acemq/acemq-go/middleware"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/ops"
	"github.com/acemq/acemq-go/retry"
	"github.com/acemq/acemq-go/topology"
)

// fxConfig is the app's mq.Config for the test broker (or url).
func fxConfig(t testing.TB, url ...string) fx.Option {
	u := testenv.URL()
	if len(url) > 0 {
		u = url[0]
	}
	return fx.Supply(mq.Config{URLs: []string{u}, Logger: testenv.Logger(t),
		ReconnectMin: 20 * time.Millisecond, ReconnectMax: 200 * time.Millisecond})
}

// fxApp builds an fxtest app with the module and the test's options.
func fxApp(t testing.TB, opts ...fx.Option) *fxtest.App {
	return fxtest.New(t, append([]fx.Option{fx.NopLogger, fxmodule.Module}, opts...)...)
}

// fxPublish publishes bodies to queue q through the default exchange on a
// publisher it closes again.
func fxPublish(t testing.TB, b *mq.Broker, q string, bodies ...string) {
	t.Helper()
	p := b.Publisher("")
	defer p.Close()
	ctx := testenv.Context(t, 20*time.Second)
	for _, body := range bodies {
		if err := p.Publish(ctx, q, mq.Message{Body: []byte(body)}); err != nil {
			t.Fatalf("publish to %s: %v", q, err)
		}
	}
}

func fxCount(t testing.TB, b *mq.Broker, q string) (ready, consumers int) {
	t.Helper()
	c, err := ops.Count(testenv.Context(t, 10*time.Second), b, q)
	if err != nil || len(c) != 1 {
		t.Fatalf("count %s: %v", q, err)
	}
	return c[0].Ready, c[0].Consumers
}

// A whole app: the topology is declared (with the failure half the
// consumer's standard stack adds), shared middleware wraps the consumer's
// own in the order given, a published message is handled, traced through
// the app's TracerProvider, and stop leaves nothing behind. The message is
// handled after RequireStart has cancelled its start context: nothing the
// app runs lives on it.
func TestFxStartAndStop(t *testing.T) {
	helper := testenv.Broker(t, mq.Config{Logger: testenv.Discard()})
	q := testenv.Name(t)
	ex := testenv.Name(t, "events")
	testenv.Cleanup(t, q, topology.DeadLetterQueue(q), topology.ParkedQueue(q))
	testenv.CleanupExchanges(t, ex)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	var (
		mu    sync.Mutex
		order []string
	)
	mark := func(name string) mq.Middleware {
		return func(next mq.Handler) mq.Handler {
			return mq.HandlerFunc(func(ctx context.Context, d *mq.Delivery) error {
				mu.Lock()
				order = append(order, name)
				mu.Unlock()
				return next.Handle(ctx, d)
			})
		}
	}
	handled := make(chan string, 4)
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	policy := retry.Fixed(2, 100*time.Millisecond)

	var b *mq.Broker
	app := fxApp(t, fxConfig(t),
		fx.Provide(func() trace.TracerProvider { return tp }),
		fxmodule.AsTopology(func() *topology.Topology {
			return topology.New().Exchange(ex).Queue(q, topology.DeadLetter()).Binding(q, ex, "order.placed")
		}),
		fxmodule.AsConsumer(func() fxmodule.Consumer {
			return fxmodule.Consumer{
				Queue: q,
				Handler: mq.HandlerFunc(func(ctx context.Context, d *mq.Delivery) error {
					handled <- string(d.Body)
					return nil
				}),
				Options: []mq.ConsumerOption{middleware.Standard(policy), mq.WithMiddleware(mark("own"))},
			}
		}),
		fxmodule.AsMiddleware(0, mark("first")),
		fxmodule.AsMiddleware(1, mark("second")),
		fx.Populate(&b),
	)
	app.RequireStart()

	for _, name := range []string{q, topology.DeadLetterQueue(q), topology.ParkedQueue(q)} {
		if ok, err := helper.QueueExists(testenv.Context(t, 10*time.Second), name); err != nil || !ok {
			t.Errorf("queue %s after start: exists %v, %v", name, ok, err)
		}
	}
	p := b.Publisher(ex)
	if err := p.Publish(testenv.Context(t, 10*time.Second), "order.placed", mq.Message{Body: []byte("order 1")}); err != nil {
		t.Fatalf("publish: %v", err)
	}
	p.Close()
	select {
	case body := <-handled:
		if body != "order 1" {
			t.Errorf("handled %q", body)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the consumer did not handle the message")
	}
	testenv.Eventually(t, 5*time.Second, func() bool { n, _ := fxCount(t, helper, q); return n == 0 }, "the message was not acked")
	if _, consumers := fxCount(t, helper, q); consumers != 1 {
		t.Errorf("%d consumers on %s while running, want 1", consumers, q)
	}

	app.RequireStop()
	_ = tp.Shutdown(context.Background())

	mu.Lock()
	if got := strings.Join(order, ">"); got != "first>second>own" {
		t.Errorf("middleware ran %s, want first>second>own", got)
	}
	mu.Unlock()
	// A quorum queue forgets a consumer asynchronously: a cancelled one
	// that still held a delivery stays counted until its ack and its
	// channel's close reach the queue's leader, which is after Stop has
	// returned (up to ~25 ms here, measured). The bound is generous; a
	// consumer the library failed to cancel or close stays for ever.
	if !testenv.Poll(2*time.Second, func() bool { _, n := fxCount(t, helper, q); return n == 0 }) {
		_, consumers := fxCount(t, helper, q)
		t.Errorf("%d consumers on %s 2s after stop", consumers, q)
	}
	var names []string
	for _, s := range spans.Ended() {
		names = append(names, s.Name())
	}
	if !strings.Contains(strings.Join(names, ","), "process "+q) {
		t.Errorf("no process span through the app's TracerProvider; spans: %v", names)
	}
	if b.Ready() {
		t.Error("the broker is still connected after stop")
	}
}

// Stop drains: a handler busy when stop begins finishes, and its message
// is acked; a handler that outlasts the stop context leaves its message
// back in the queue, and the broker is closed anyway.
func TestFxStopWithInFlightWork(t *testing.T) {
	for _, tc := range []struct {
		name     string
		work     time.Duration
		stop     time.Duration
		left     int // messages in the queue after stop
		stopFail bool
	}{
		{"drains", 800 * time.Millisecond, 10 * time.Second, 0, false},
		{"outlasts the stop timeout", 1500 * time.Millisecond, 300 * time.Millisecond, 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			helper := testenv.Broker(t, mq.Config{Logger: testenv.Discard()})
			q := testenv.Name(t)
			testenv.Cleanup(t, q)
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

			started, finished := make(chan struct{}), make(chan struct{})
			var calls atomic.Int32
			app := fxApp(t, fxConfig(t),
				fxmodule.AsTopology(func() *topology.Topology { return topology.New().Queue(q, topology.Classic()) }),
				fxmodule.AsConsumer(func() fxmodule.Consumer {
					return fxmodule.Consumer{Queue: q, Handler: mq.HandlerFunc(func(ctx context.Context, d *mq.Delivery) error {
						if calls.Add(1) > 1 {
							return nil
						}
						close(started)
						time.Sleep(tc.work) // deliberately deaf to ctx
						close(finished)
						return nil
					})}
				}),
			)
			app.RequireStart()
			fxPublish(t, helper, q, "slow")
			select {
			case <-started:
			case <-time.After(10 * time.Second):
				t.Fatal("the handler did not start")
			}
			ctx, cancel := context.WithTimeout(context.Background(), tc.stop)
			defer cancel()
			began := time.Now()
			err := app.Stop(ctx)
			t.Logf("stop took %v: %v", time.Since(began).Round(time.Millisecond), err)
			if (err != nil) != tc.stopFail {
				t.Fatalf("stop: %v, want an error: %v", err, tc.stopFail)
			}
			if !tc.stopFail {
				select {
				case <-finished:
				default:
					t.Fatal("stop returned before the in-flight handler finished")
				}
			}
			<-finished
			testenv.Eventually(t, 5*time.Second, func() bool { n, _ := fxCount(t, helper, q); return n == tc.left },
				"%s does not hold %d message(s)", q, tc.left)
			if n, c := fxCount(t, helper, q); n != tc.left || c != 0 {
				t.Fatalf("%s after stop: %d ready, %d consumers; want %d, 0", q, n, c, tc.left)
			}
		})
	}
}

// A broker that is down (a proxy refusing every connection) fails start
// within the start timeout, with an error naming the broker — not a hang.
func TestFxStartWithBrokerDown(t *testing.T) {
	p, u := testenv.Proxy(t)
	p.Refuse(true)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	const timeout = 2 * time.Second
	app := fxApp(t, fxConfig(t, u), fx.StartTimeout(timeout),
		fxmodule.AsTopology(func() *topology.Topology { return topology.New().Queue("goit.never") }),
		fxmodule.AsConsumer(func() fxmodule.Consumer {
			return fxmodule.Consumer{Queue: "goit.never", Handler: mq.HandlerFunc(func(context.Context, *mq.Delivery) error { return nil })}
		}))
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	began := time.Now()
	err := app.Start(ctx)
	took := time.Since(began)
	t.Logf("start failed after %v: %v", took.Round(time.Millisecond), err)
	if err == nil {
		t.Fatal("start succeeded with the broker down")
	}
	if took > timeout+250*time.Millisecond {
		t.Errorf("start took %v with a %v start timeout", took, timeout)
	}
	if !strings.Contains(err.Error(), "connect to the broker") || !strings.Contains(err.Error(), p.Addr()) {
		t.Errorf("error %q does not say which broker could not be reached", err)
	}
	if strings.Contains(err.Error(), "guest:guest") {
		t.Errorf("error %q shows the password", err)
	}
	if p.Accepted() != 0 {
		t.Errorf("the proxy forwarded %d connections while refusing", p.Accepted())
	}
}

// A queue that exists with other arguments fails start with the refusal
// named, and the failed start leaves nothing open.
func TestFxBadTopologyFailsStart(t *testing.T) {
	helper := testenv.Broker(t, mq.Config{Logger: testenv.Discard()})
	q := testenv.Name(t, "x")
	testenv.Cleanup(t, q)
	if err := helper.Declare(testenv.Context(t, 10*time.Second), topology.New().Queue(q, topology.Classic())); err != nil {
		t.Fatalf("declare %s classic: %v", q, err)
	}
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	var b *mq.Broker
	app := fxApp(t, fxConfig(t),
		fxmodule.AsTopology(func() *topology.Topology { return topology.New().Queue(q) }), // quorum
		fx.Populate(&b))
	err := app.Start(testenv.Context(t, 15*time.Second))
	t.Logf("start: %v", err)
	if !errors.Is(err, mq.ErrPreconditionFailed) {
		t.Fatalf("start: %v, want mq.ErrPreconditionFailed", err)
	}
	if !strings.Contains(err.Error(), q) || !strings.Contains(err.Error(), "declare the topology") {
		t.Errorf("error %q does not name the refused queue", err)
	}
	if b.Ready() {
		t.Error("the broker is still connected after the failed start")
	}
	if err := app.Stop(testenv.Context(t, 10*time.Second)); err != nil {
		t.Errorf("stop after a failed start: %v", err)
	}
}

// A consumer that cannot start (its queue does not exist) fails start
// naming the queue, before any consumer starts or anything is declared,
// and the broker is closed again.
func TestFxConsumerFailingStartCleansUp(t *testing.T) {
	helper := testenv.Broker(t, mq.Config{Logger: testenv.Discard()})
	base := testenv.Name(t)
	good, missing := base+".a-good", base+".b-missing" // consumers start in queue order
	testenv.Cleanup(t, good, missing)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	noop := mq.HandlerFunc(func(context.Context, *mq.Delivery) error { return nil })
	var events fxEvents
	var b *mq.Broker
	app := fxApp(t, fxConfig(t),
		fxmodule.AsTopology(func() *topology.Topology { return topology.New().Queue(good, topology.Classic()) }),
		fxmodule.AsConsumer(func() fxmodule.Consumer { return fxmodule.Consumer{Queue: missing, Handler: noop} }),
		fxmodule.AsConsumer(func() fxmodule.Consumer {
			return fxmodule.Consumer{Queue: good, Handler: noop, Options: []mq.ConsumerOption{mq.WithMiddleware(
				func(next mq.Handler) mq.Handler { return &fxLifecycleProbe{Handler: next, events: &events} })}}
		}),
		fx.Populate(&b))
	err := app.Start(testenv.Context(t, 15*time.Second))
	t.Logf("start: %v", err)
	if !errors.Is(err, mq.ErrNotFound) || !strings.Contains(err.Error(), missing) {
		t.Fatalf("start: %v, want mq.ErrNotFound naming %s", err, missing)
	}
	if got := events.String(); got != "" {
		t.Errorf("the consumer of %s: %s, want nothing (the missing queue is found before any consumer starts)", good, got)
	}
	if _, c := fxCount(t, helper, good); c != 0 {
		t.Errorf("%d consumers left on %s after the failed start", c, good)
	}
	if b.Ready() {
		t.Error("the broker is still connected after the failed start")
	}
	_ = app.Stop(testenv.Context(t, 10*time.Second))
}

// fxEvents records what happened, in order.
type fxEvents struct {
	mu  sync.Mutex
	log []string
}

func (e *fxEvents) add(s string) { e.mu.Lock(); e.log = append(e.log, s); e.mu.Unlock() }
func (e *fxEvents) String() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return strings.Join(e.log, ",")
}

// fxLifecycleProbe is a middleware's handler that records its consumer's
// subscribe and stop.
type fxLifecycleProbe struct {
	mq.Handler
	events *fxEvents
}

func (p *fxLifecycleProbe) Subscribe(context.Context, *mq.Subscription) error {
	p.events.add("subscribe")
	return nil
}

func (p *fxLifecycleProbe) Stop(context.Context) error {
	p.events.add("stop")
	return nil
}

// A consumer that gives up (its queue deleted, WithGiveUpAfter) asks the
// app to shut down with exit code 1. The app declared the queue, so it is
// told not to declare it again (Config.NoRedeclare): otherwise it would.
func TestFxConsumerGivingUpShutsTheAppDown(t *testing.T) {
	helper := testenv.Broker(t, mq.Config{Logger: testenv.Discard()})
	q := testenv.Name(t)
	testenv.Cleanup(t, q)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	app := fxApp(t, fx.Supply(mq.Config{URLs: []string{testenv.URL()}, Logger: testenv.Logger(t),
		ReconnectMin: 20 * time.Millisecond, ReconnectMax: 200 * time.Millisecond, NoRedeclare: true}),
		fxmodule.AsTopology(func() *topology.Topology { return topology.New().Queue(q, topology.Classic()) }),
		fxmodule.AsConsumer(func() fxmodule.Consumer {
			return fxmodule.Consumer{Queue: q,
				Handler: mq.HandlerFunc(func(context.Context, *mq.Delivery) error { return nil }),
				Options: []mq.ConsumerOption{mq.WithGiveUpAfter(300 * time.Millisecond)}}
		}))
	app.RequireStart()
	done := app.Wait()
	if _, err := helper.DeleteQueue(testenv.Context(t, 10*time.Second), q); err != nil {
		t.Fatal(err)
	}
	select {
	case sig := <-done:
		if sig.ExitCode != 1 {
			t.Errorf("shutdown signal %+v, want exit code 1", sig)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the app was not asked to shut down")
	}
	app.RequireStop()
}

// The fx topology goes through Broker.Declare, so a queue it declared and
// somebody deleted under its consumer is declared again, and what is
// published after the deletion is handled (issue 21).
func TestFxTopologyQueueDeclaredAgain(t *testing.T) {
	helper := testenv.Broker(t, mq.Config{Logger: testenv.Discard()})
	q := testenv.Name(t)
	testenv.CleanupDerived(t, q, servicePolicy)
	got := make(chan string, 16)
	app := fxApp(t, fxConfig(t),
		fxmodule.AsTopology(func() *topology.Topology { return topology.New().Queue(q, topology.Retry(servicePolicy)) }),
		fxmodule.AsConsumer(func() fxmodule.Consumer {
			return fxmodule.Consumer{Queue: q, Standard: true,
				Handler: mq.HandlerFunc(func(_ context.Context, d *mq.Delivery) error { got <- d.MessageId; return nil })}
		}))
	app.RequireStart()
	defer app.RequireStop()
	testenv.DeleteBehind(t, helper, q)
	deleted := time.Now()
	pub := helper.Publisher("")
	defer pub.Close()
	ctx := testenv.Context(t, 10*time.Second)
	for {
		err := pub.Publish(ctx, q, mq.Message{MessageId: "after"})
		if err == nil {
			break
		}
		// Unroutable while the queue is gone; the broker may nack one routed to it
		// as it goes.
		if !errors.Is(err, mq.ErrUnroutable) && !errors.Is(err, mq.ErrNacked) {
			t.Fatalf("publish: %v (is %s not declared again?)", err, q)
		}
		time.Sleep(20 * time.Millisecond)
	}
	select {
	case id := <-got:
		t.Logf("%s handled %v after the deletion", id, time.Since(deleted).Round(time.Millisecond))
	case <-time.After(5 * time.Second):
		t.Fatal("the message published after the deletion was not handled within 5 s")
	}
}
