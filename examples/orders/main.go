package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/lmittmann/tint"
	amqp "github.com/rabbitmq/amqp091-go"
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

// The demo's names, under a prefix of their own so that on a shared broker
// they cannot be a service's (a real shipping.orders, say): DEMO_PREFIX, or
// else acemq-demo-<random>. drawn once per run. The library's shared
// dead-letter exchange, acemq.dlx, is declared but never deleted.
var (
	prefix   = demoPrefix()
	exchange = prefix + "orders-events"
	shipping = prefix + "shipping.orders"
	billing  = prefix + "billing.orders"
)

// demoPrefix is DEMO_PREFIX if set, else acemq-demo-<8 hex digits>.
func demoPrefix() string {
	if p, ok := os.LookupEnv("DEMO_PREFIX"); ok {
		return p
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "acemq-demo-" + hex.EncodeToString(b[:]) + "."
}

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

	// Ctrl-C or SIGTERM stops the demo and cleans up what it declared; a
	// second one exits at once, leaving what is left.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	interrupted := make(chan struct{})
	go func() {
		s := <-sigs
		log.Warn("interrupted: stopping, then deleting what the demo declared (again to exit at once)", "signal", s)
		close(interrupted)
		<-sigs
		log.Error("interrupted twice: exiting without cleaning up", "prefix", prefix)
		os.Exit(130)
	}()

	fmt.Println(banner("The topology this service declares (printed before it is applied)"))
	fmt.Print(demoTopology())
	fmt.Println()
	fmt.Println(banner("The retry policy"))
	fmt.Printf("%s\nbroker rungs: %v\n\n", policy, policy.BrokerRungs())

	// The demo deletes what it declared when it ends, so it runs only on
	// names nobody else has: a queue or exchange of its name that exists
	// already is somebody else's, and the demo leaves it alone.
	if err := nothingThere(url); err != nil {
		log.Error("the demo will not run", "error", err)
		os.Exit(1)
	}

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
		fxmodule.AsMiddleware(0, progress.middleware), // outermost: sees every final outcome
		fxmodule.AsConsumer(shippingConsumer),
		fxmodule.AsConsumer(billingConsumer),
		fx.Invoke(publishOrders(log, progress)),
	)

	code := 0
	// An interrupt during Start waits for it (at most 20 s): a start cut
	// short can leave a consumer running, which would declare its queue
	// again as the clean-up deletes it.
	startCtx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	err := app.Start(startCtx)
	cancel()
	if err != nil {
		log.Error("demo failed to start", "error", err)
		code = 1
	} else {
		select {
		case <-progress.done:
			log.Info("every order reached its end; stopping")
		case <-interrupted:
			code = 130
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
	}
	select {
	case <-interrupted:
		code = 130
	default:
	}

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
// installed outermost for every consumer with fxmodule.AsMiddleware.
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

// nothingThere checks, on a connection of its own, that none of the
// demo's queues and exchange exists yet: they are then the demo's own to
// delete at the end.
func nothingThere(url string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	b, err := quietBroker(ctx, url)
	if err != nil {
		return err
	}
	defer b.Close(ctx)
	var there []string
	for _, q := range demoTopology().Queues() {
		ok, err := b.QueueExists(ctx, q.Name)
		if err != nil {
			return err
		}
		if ok {
			there = append(there, "queue "+q.Name)
		}
	}
	ch, err := b.Channel(ctx)
	if err != nil {
		return err
	}
	err = ch.ExchangeDeclarePassive(exchange, "topic", true, false, false, false, nil)
	switch {
	case err == nil:
		there = append(there, "exchange "+exchange)
		_ = ch.Close()
	case isNotFound(err):
	default:
		return err
	}
	if len(there) > 0 {
		return fmt.Errorf("%v exist already: they are not the demo's, so it neither uses nor deletes them; run it under another DEMO_PREFIX (unset, it draws one per run)", there)
	}
	return nil
}

// quietBroker is a connection of the demo's own for its checks before and
// after the run, logging nothing.
func quietBroker(ctx context.Context, url string) (*mq.Broker, error) {
	b := mq.New(mq.Config{URLs: []string{url}, Logger: slog.New(slog.DiscardHandler)})
	if err := b.Start(ctx); err != nil {
		return nil, err
	}
	return b, nil
}

func isNotFound(err error) bool {
	var ae *amqp.Error
	return errors.As(err, &ae) && ae.Code == amqp.NotFound
}

// cleanup deletes the demo's queues and exchange on a connection of its
// own, so the demo leaves nothing behind. They are its own: nothingThere
// found none of them before it declared them. acemq.dlx, which other
// services share, stays.
func cleanup(url string, log *slog.Logger) error {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	b, err := quietBroker(ctx, url)
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
