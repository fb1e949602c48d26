package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/lmittmann/tint"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/fx"
	"go.uber.org/fx/fxevent"

	"github.com/acemq/acemq-go/fxmodule"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/retry"
	"github.com/acemq/acemq-go/topology"
)

// The demo's ladder, short enough to watch: five deliveries, the first two
// waits (300 ms, 600 ms) in the consumer's process, the last two (1 s, 2 s)
// on the broker in shipping.orders.retry.1s and .retry.2s.
var policy = retry.Waits(300*time.Millisecond, 600*time.Millisecond, time.Second, 2*time.Second).
	With(retry.InProcessLimit(800 * time.Millisecond))

// The demo's names. DEMO_PREFIX puts a prefix on every one of them (the
// test that runs the demo uses goit.*, so it can share a broker).
var (
	prefix   = os.Getenv("DEMO_PREFIX")
	exchange = prefix + "orders-events"
	shipping = prefix + "shipping.orders"
	billing  = prefix + "billing.orders"
)

func demoTopology() *topology.Topology {
	return topology.New().
		Exchange(exchange, topology.Topic).
		Queue(shipping, topology.DeadLetter(), topology.Retry(policy)).
		Queue(billing, topology.DeadLetter(), topology.Retry(policy)).
		Binding(shipping, exchange, "order.placed").
		Binding(billing, exchange, "order.placed")
}

func main() {
	log := newLogger()
	url := os.Getenv("AMQP_URL")
	if url == "" {
		url = "amqp://guest:guest@127.0.0.1:5672/"
	}

	fmt.Println(banner("The topology this service declares (printed before it is applied)"))
	fmt.Print(demoTopology())
	fmt.Println()
	fmt.Println(banner("The retry policy"))
	fmt.Printf("%s\nbroker rungs: %v\n\n", policy, policy.BrokerRungs())

	spans := &spanLog{}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	reader := sdkmetric.NewManualReader()
	meters := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	progress := newTracker(len(orders))

	app := fx.New(
		fx.WithLogger(func() fxevent.Logger { return fxevent.NopLogger }),
		fx.StartTimeout(20*time.Second),
		fx.StopTimeout(20*time.Second),
		fx.Supply(mq.Config{URLs: []string{url}, ConnectionName: "acemq-demo-orders", Logger: log}, log),
		fx.Provide(
			func() trace.TracerProvider { return tp },
			func() metric.MeterProvider { return meters },
		),
		fxmodule.Module,
		fxmodule.AsTopology(demoTopology),
		fxmodule.WithMiddleware(0, progress.middleware), // outermost: sees every final outcome
		fxmodule.AsConsumer(shippingConsumer),
		fxmodule.AsConsumer(billingConsumer),
		fx.Invoke(publishOrders(log, progress)),
	)

	code := 0
	startCtx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	if err := app.Start(startCtx); err != nil {
		log.Error("demo failed to start", "error", err)
		cancel()
		os.Exit(1)
	}
	cancel()
	select {
	case <-progress.done:
		log.Info("every order reached its end; stopping")
	case <-time.After(45 * time.Second):
		log.Error("demo timed out waiting for orders", "pending", progress.pending())
		code = 1
	}
	stopCtx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	if err := app.Stop(stopCtx); err != nil {
		log.Error("demo failed to stop cleanly", "error", err)
		code = 1
	}
	cancel()

	fmt.Println()
	fmt.Println(banner("What happened to each order (one trace each)"))
	spans.print(os.Stdout)
	fmt.Println()
	fmt.Println(banner("Outcomes (acemq.message.outcomes)"))
	printOutcomes(os.Stdout, reader)
	fmt.Println()
	fmt.Println(banner("Cleaning up what the demo declared"))
	if err := cleanup(url, log); err != nil {
		log.Error("cleanup failed", "error", err)
		code = 1
	}
	_ = tp.Shutdown(context.Background())
	os.Exit(code)
}

func newLogger() *slog.Logger {
	return slog.New(tint.NewTextHandler(os.Stdout, &tint.Options{
		Level:      slog.LevelDebug,
		TimeFormat: "15:04:05.000",
		NoColor:    os.Getenv("DEMO_NO_COLOR") != "",
	}))
}

func banner(s string) string { return "── " + s + " " + dashes(72-len(s)) }

func dashes(n int) string {
	if n < 3 {
		n = 3
	}
	b := make([]byte, 0, n*3)
	for range n {
		b = append(b, "─"...)
	}
	return string(b)
}

// tracker counts orders to their end (acked, parked or dead-lettered) on
// both queues. Its middleware is a plain func(mq.Handler) mq.Handler,
// installed outermost for every consumer with fxmodule.WithMiddleware.
type tracker struct {
	mu     sync.Mutex
	left   int
	done   chan struct{}
	closed bool
}

func newTracker(nOrders int) *tracker {
	return &tracker{left: 2 * nOrders, done: make(chan struct{})} // shipping and billing each see every order
}

func (t *tracker) middleware(next mq.Handler) mq.Handler {
	return mq.HandlerFunc(func(ctx context.Context, d *mq.Delivery) error {
		err := next.Handle(ctx, d)
		if err == nil {
			switch d.Outcome() {
			case mq.OutcomeRetry: // comes back later
			default:
				t.finished()
			}
		}
		return err
	})
}

func (t *tracker) finished() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.left--
	if t.left <= 0 && !t.closed {
		t.closed = true
		close(t.done)
	}
}

func (t *tracker) pending() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.left
}

// cleanup deletes the demo's queues and exchange on a connection of its
// own, so the demo leaves nothing behind.
func cleanup(url string, log *slog.Logger) error {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	b, err := mq.Dial(ctx, url, mq.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		return err
	}
	defer b.Close(ctx)
	var errs []error
	for _, q := range demoTopology().Queues() {
		n, err := b.DeleteQueue(ctx, q.Name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		log.Info("deleted queue", "queue", q.Name, "messages", n)
	}
	ch, err := b.Channel(ctx)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	defer ch.Close()
	if err := ch.ExchangeDelete(exchange, false, false); err != nil {
		errs = append(errs, err)
	} else {
		log.Info("deleted exchange", "exchange", exchange)
	}
	return errors.Join(errs...)
}
