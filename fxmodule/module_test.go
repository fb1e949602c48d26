package fxmodule

import (
	"context"
	"errors"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/metric"
	noopmetric "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	nooptrace "go.opentelemetry.io/otel/trace/noop"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
	"go.uber.org/goleak"

	"github.com/acemq/acemq-go/middleware"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/topology"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// downURL is a port nothing listens on: a broker that is down.
const downURL = "amqp://guest:secret@127.0.0.1:1/"

func cfg() mq.Config {
	return mq.Config{URLs: []string{downURL}, Logger: slog.New(slog.DiscardHandler)}
}

var noop = mq.HandlerFunc(func(context.Context, *mq.Delivery) error { return nil })

func fragment(q string, opts ...topology.QueueOption) func() *topology.Topology {
	return func() *topology.Topology { return topology.New().Queue(q, opts...) }
}

func TestValidateAppWiring(t *testing.T) {
	err := fx.ValidateApp(
		fx.Supply(cfg()),
		Module,
		AsTopology(fragment("orders")),
		AsTopology(topology.New().Exchange("orders-events")),
		AsConsumer(func(b *mq.Broker) Consumer { return Consumer{Queue: "orders", Handler: noop} }),
		AsConsumer(func() (Consumer, error) { return Consumer{Queue: "orders", Handler: noop}, nil }),
		AsMiddleware(10, func(*mq.Broker) mq.Middleware { return nil }),
		fx.Invoke(func(*mq.Broker) {}),
	)
	if err != nil {
		t.Fatalf("ValidateApp: %v", err)
	}
}

func TestValidateAppNeedsConfig(t *testing.T) {
	err := fx.ValidateApp(Module, fx.Invoke(func(*mq.Broker) {}))
	if err == nil || !strings.Contains(err.Error(), "mq.Config") {
		t.Fatalf("ValidateApp without mq.Config: %v, want a missing mq.Config", err)
	}
}

func TestOptionalDependencies(t *testing.T) {
	// With every optional dependency given, and with none: both wire.
	for name, extra := range map[string]fx.Option{
		"none": fx.Options(),
		"all": fx.Options(
			fx.Supply(slog.New(slog.DiscardHandler)),
			fx.Provide(func() trace.TracerProvider { return nooptrace.NewTracerProvider() }),
			fx.Provide(func() metric.MeterProvider { return noopmetric.NewMeterProvider() }),
		),
		"tracer only": fx.Provide(func() trace.TracerProvider { return nooptrace.NewTracerProvider() }),
	} {
		t.Run(name, func(t *testing.T) {
			var b *mq.Broker
			app := fx.New(fx.NopLogger, fx.Supply(cfg()), Module, extra, fx.Populate(&b))
			if err := app.Err(); err != nil {
				t.Fatalf("fx.New: %v", err)
			}
			if b == nil {
				t.Fatal("no *mq.Broker provided")
			}
		})
	}
}

// The module provides the broker and nothing it does not own.
func TestProvidesOnlyTheBroker(t *testing.T) {
	for name, target := range map[string]any{
		"logger":    new(*slog.Logger),
		"tracer":    new(trace.TracerProvider),
		"meter":     new(metric.MeterProvider),
		"topology":  new(*topology.Topology),
		"consumers": new(Consumer),
	} {
		t.Run(name, func(t *testing.T) {
			app := fx.New(fx.NopLogger, fx.Supply(cfg()), Module, AsConsumer(func() Consumer {
				return Consumer{Queue: "q", Handler: noop}
			}), fx.Populate(target))
			if app.Err() == nil {
				t.Fatalf("the module provides %T", target)
			}
		})
	}
}

// mq.Config.Logger is the one place AceMQ takes its logger. An app that
// provides a *slog.Logger but leaves Config.Logger nil fails fx.New with
// an error that says to set Config.Logger, rather than the broker logging
// somewhere the app did not choose; with Config.Logger set, the app's
// logger is none of the module's business.
func TestAppLoggerWithoutConfigLoggerFails(t *testing.T) {
	l := slog.New(slog.DiscardHandler)
	c := cfg()
	c.Logger = nil
	app := fx.New(fx.NopLogger, fx.Supply(c), fx.Supply(l), Module)
	err := app.Err()
	if err == nil {
		t.Fatal("fx.New accepted an app *slog.Logger with Config.Logger nil")
	}
	if !strings.Contains(err.Error(), "set mq.Config.Logger") {
		t.Fatalf("the error does not say to set mq.Config.Logger: %v", err)
	}
	// Config.Logger set: the app's own logger may sit beside it.
	c.Logger = slog.New(slog.DiscardHandler)
	var b *mq.Broker
	app = fx.New(fx.NopLogger, fx.Supply(c), fx.Supply(l), Module, fx.Populate(&b))
	if err := app.Err(); err != nil {
		t.Fatal(err)
	}
	if b.Logger() != c.Logger {
		t.Fatal("the broker does not log to Config.Logger")
	}
	// No logger anywhere: the default, no error.
	c.Logger = nil
	app = fx.New(fx.NopLogger, fx.Supply(c), Module, fx.Populate(&b))
	if err := app.Err(); err != nil {
		t.Fatal(err)
	}
}

// Params has no logger of its own: Config.Logger is the one place.
func TestParamsHasNoLogger(t *testing.T) {
	if _, ok := reflect.TypeFor[Params]().FieldByName("Logger"); ok {
		t.Fatal("fxmodule.Params.Logger is a second place to give the logger (mq.Config.Logger is the one)")
	}
}

func TestConstructorOfTheWrongType(t *testing.T) {
	cases := map[string]fx.Option{
		"topology value":   AsTopology(topology.Topology{}),
		"topology pointer": AsTopology(func() topology.Topology { return topology.Topology{} }),
		"consumer pointer": AsConsumer(func() *Consumer { return nil }),
		"consumer nil":     AsConsumer(nil),
		"consumer two":     AsConsumer(func() (Consumer, Consumer) { return Consumer{}, Consumer{} }),
		"not a function":   AsConsumer(Consumer{}),
		"middleware slice": AsMiddleware(1, []mq.Middleware{}),
		"middleware nil":   AsMiddleware(1, nil),
		"handler":          AsMiddleware(1, func() mq.Handler { return noop }),
	}
	for name, opt := range cases {
		t.Run(name, func(t *testing.T) {
			app := fx.New(fx.NopLogger, fx.Supply(cfg()), Module, opt)
			err := app.Err()
			if err == nil || !strings.Contains(err.Error(), "fxmodule.As") {
				t.Fatalf("fx.New: %v, want an error naming the helper", err)
			}
		})
	}
}

func TestMiddlewareGivenTwiceWithOneOrder(t *testing.T) {
	app := fx.New(fx.NopLogger, fx.Supply(cfg()), Module, AsMiddleware(5, middleware.Recover()), fx.Module("other", AsMiddleware(5, middleware.Logging())))
	err := app.Err()
	if err == nil || !strings.Contains(err.Error(), "AsMiddleware was given twice with order 5") || strings.Count(err.Error(), "module_test.go:") != 2 {
		t.Fatalf("fx.New: %v, want an error naming both AsMiddleware calls", err)
	}
}

func TestMergedTopologyValidatedTogether(t *testing.T) {
	app := fx.New(fx.NopLogger, fx.Supply(cfg()), Module,
		AsTopology(fragment("orders", topology.Quorum())),
		fx.Module("billing", AsTopology(fragment("orders", topology.Classic()))),
		AsTopology(func() *topology.Topology { return topology.New().Binding("orders", "nowhere", "k") }),
		AsTopology(func() *topology.Topology { return nil }),
	)
	err := app.Err()
	if !errors.Is(err, topology.ErrInvalid) {
		t.Fatalf("fx.New: %v, want topology.ErrInvalid", err)
	}
	for _, want := range []string{`queue "orders" is already declared differently`, "nowhere"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

func TestConstructorErrorFailsTheApp(t *testing.T) {
	boom := errors.New("boom")
	app := fx.New(fx.NopLogger, fx.Supply(cfg()), Module, AsConsumer(func() (Consumer, error) { return Consumer{}, boom }))
	if !errors.Is(app.Err(), boom) {
		t.Fatalf("fx.New: %v, want the constructor's error", app.Err())
	}
}

// Consumers fed from any module reach the runner, which checks them.
func TestConsumerChecks(t *testing.T) {
	app := fx.New(fx.NopLogger, fx.Supply(cfg()), Module,
		fx.Module("orders", fx.Module("deep", AsConsumer(func() Consumer { return Consumer{Handler: noop} }))),
		AsConsumer(func() Consumer { return Consumer{Queue: "billing"} }),
	)
	err := app.Err()
	if err == nil || !strings.Contains(err.Error(), "Queue is empty") || !strings.Contains(err.Error(), `consumer of "billing": Handler is nil`) {
		t.Fatalf("fx.New: %v", err)
	}
}

// A broker that is down fails start with the connect error, redacted,
// within the start timeout — not a hang, not a bare deadline.
func TestStartWithTheBrokerDown(t *testing.T) {
	const timeout = 1500 * time.Millisecond
	app := fxtest.New(t, fx.NopLogger, fx.StartTimeout(timeout), fx.Supply(cfg()), Module,
		AsTopology(fragment("orders")),
		AsConsumer(func() Consumer { return Consumer{Queue: "orders", Handler: noop} }))
	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err := app.Start(ctx)
	took := time.Since(began)
	if err == nil {
		t.Fatal("start succeeded with the broker down")
	}
	t.Logf("start failed after %v: %v", took.Round(time.Millisecond), err)
	if took > timeout+200*time.Millisecond {
		t.Errorf("start took %v, longer than the %v start timeout", took, timeout)
	}
	msg := err.Error()
	for _, want := range []string{"connect to the broker", "127.0.0.1:1", "connection refused"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not mention %q", msg, want)
		}
	}
	if strings.Contains(msg, "secret") {
		t.Errorf("error %q shows the password", msg)
	}
}

func TestBeforeDeadline(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	sctx, scancel := beforeDeadline(ctx)
	defer scancel()
	d, _ := ctx.Deadline()
	sd, _ := sctx.Deadline()
	if m := d.Sub(sd); m < 150*time.Millisecond || m > 250*time.Millisecond {
		t.Errorf("margin %v, want about 200ms", m)
	}
	long, lcancel := context.WithTimeout(context.Background(), time.Minute)
	defer lcancel()
	lctx, lscancel := beforeDeadline(long)
	defer lscancel()
	ld, _ := long.Deadline()
	lsd, _ := lctx.Deadline()
	if m := ld.Sub(lsd); m != time.Second {
		t.Errorf("margin %v, want 1s at most", m)
	}
	nctx, ncancel := beforeDeadline(context.Background())
	defer ncancel()
	if _, ok := nctx.Deadline(); ok {
		t.Error("a context without deadline got one")
	}
}

type eventHook struct{}

func (eventHook) OnEvent(context.Context, mq.Event) {}

// With a TracerProvider, New adds otelmq's hooks to the app's own
// Config.Hooks, never writing into the slice the app supplied.
func TestNewAddsOtelHooksToACopy(t *testing.T) {
	hooks := make([]any, 1, 2)
	hooks[0] = eventHook{}
	c := cfg()
	c.Hooks = hooks
	lc := fxtest.NewLifecycle(t)
	res, err := New(Params{Lifecycle: lc, Config: c, TracerProvider: nooptrace.NewTracerProvider()})
	if err != nil {
		t.Fatal(err)
	}
	defer res.Broker.Close(context.Background())
	if spare := hooks[:2][1]; spare != nil {
		t.Errorf("New wrote %T into the app's Config.Hooks", spare)
	}
}
