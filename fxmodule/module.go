package fxmodule

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/fx"

	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/otelmq"
)

// Module provides the *[mq.Broker] and runs the app's AceMQ topology and
// consumers with the app's lifecycle. See the package documentation.
var Module = fx.Module("acemq",
	fx.Provide(New),
	fx.Provide(fx.Private, newRunner),
	// The consumers and the topology are nobody's dependency: the module
	// must ask for them itself, or fx would never build them.
	fx.Invoke(func(*runner) {}),
	fx.Invoke(attachChecks),
	fx.Invoke(oneLogger),
)

// appLogger is what [oneLogger] looks at: the app's configuration and the
// *slog.Logger the app provides, if it provides one.
type appLogger struct {
	fx.In

	Config mq.Config
	Logger *slog.Logger `optional:"true"`
}

// oneLogger fails the app that provides a *slog.Logger but leaves
// mq.Config.Logger nil. Config.Logger is the one place AceMQ takes its
// logger; the module does not pick the app's logger up on its own, and a
// broker quietly logging to slog.Default() beside the app's logger is
// what a user would not expect.
func oneLogger(in appLogger) error {
	if in.Logger != nil && in.Config.Logger == nil {
		return errors.New("fxmodule: the app provides a *slog.Logger but mq.Config.Logger is nil: " +
			"set mq.Config.Logger, the one place AceMQ takes its logger " +
			"(e.g. fx.Provide(func(l *slog.Logger) mq.Config { return mq.Config{URLs: urls, Logger: l} }))")
	}
	return nil
}

// Params are [New]'s dependencies.
type Params struct {
	fx.In

	Lifecycle fx.Lifecycle
	// Config is the broker's configuration; the app supplies it. Its
	// Logger is the one place the broker takes a logger from.
	Config mq.Config
	// TracerProvider and MeterProvider instrument the broker with otelmq
	// when either is given; the other then defaults to the global one.
	// Optional: without both, no instrumentation is installed.
	TracerProvider trace.TracerProvider `optional:"true"`
	MeterProvider  metric.MeterProvider `optional:"true"`
}

// Result is what [New] provides.
type Result struct {
	fx.Out

	Broker *mq.Broker
}

// New builds the broker from p.Config (it does not connect) and hooks it to
// the lifecycle: OnStart connects, honouring the start context; OnStop
// closes it. It is the function [Module] provides, exported so the module's
// work can be reproduced without Module.
func New(p Params) (Result, error) {
	cfg := p.Config
	if p.TracerProvider != nil || p.MeterProvider != nil {
		// A copy: the supplied Config's own slice is never appended to.
		cfg.Hooks = append(slices.Clip(cfg.Hooks), otelmq.New(
			otelmq.WithTracerProvider(p.TracerProvider),
			otelmq.WithMeterProvider(p.MeterProvider),
		))
	}
	b := mq.New(cfg)
	p.Lifecycle.Append(fx.Hook{
		OnStart: func(ctx context.Context) error {
			sctx, cancel := beforeDeadline(ctx)
			defer cancel()
			if err := b.Start(sctx); err != nil {
				_ = b.Close(context.WithoutCancel(ctx)) // nothing to wait for: it never started
				return fmt.Errorf("fxmodule: start: connect to the broker: %w", err)
			}
			return nil
		},
		OnStop: func(ctx context.Context) error {
			if err := b.Close(ctx); err != nil {
				return fmt.Errorf("fxmodule: stop: close the broker: %w", err)
			}
			return nil
		},
	})
	return Result{Broker: b}, nil
}

// beforeDeadline returns a context that ends a little before ctx's
// deadline (a tenth of the time left, at most a second). fx ends start at
// its deadline with a bare "context deadline exceeded"; finishing first
// lets the hook's own error — which broker, which dial error — reach the
// caller.
func beforeDeadline(ctx context.Context) (context.Context, context.CancelFunc) {
	d, ok := ctx.Deadline()
	if !ok {
		return context.WithCancel(ctx)
	}
	margin := min(time.Until(d)/10, time.Second)
	return context.WithDeadline(ctx, d.Add(-margin))
}
