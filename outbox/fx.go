package outbox

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"reflect"

	"go.opentelemetry.io/otel/metric"
	"go.uber.org/fx"

	"github.com/acemq/acemq-go/fxmodule"
	"github.com/acemq/acemq-go/mq"
)

// Module wires the outbox into a go.uber.org/fx app that has an *sql.DB
// (opened with the pgx driver) and the *mq.Broker of fxmodule.Module: it
// provides the *Outbox (New(opts...)) and runs a Relay (NewRelay(db,
// broker, opts...)) with the app's lifecycle. Given after fxmodule.Module
// in fx.New, the relay starts after the broker has connected and the
// topology is declared, and stops before the consumers and the broker do:
// Stop lets the batch in flight finish (its confirms, its deletes) within
// the stop context; committed rows it did not reach stay in the table for
// the next start. The app's *slog.Logger and metric.MeterProvider are used
// when it has them (options given here win). The tables must exist:
// run Schema.Create at start-up or in your migrations. /readyz
// (fxmodule.ReadyHandler) covers the relay's database: see RelayCheck.
func Module(opts ...Option) fx.Option {
	return fx.Module("acemq.outbox",
		fx.Provide(func() *Outbox { return New(opts...) }),
		fx.Invoke(func(p relayParams) { runRelay(p, opts) }),
		fxmodule.AsCheck(func(db *sql.DB) fxmodule.Check { return RelayCheck(db, newConfig(opts).schema) }),
	)
}

type relayParams struct {
	fx.In

	Lifecycle     fx.Lifecycle
	DB            *sql.DB
	Broker        *mq.Broker
	Logger        *slog.Logger         `optional:"true"`
	MeterProvider metric.MeterProvider `optional:"true"`
}

func runRelay(p relayParams, opts []Option) {
	var app []Option
	if p.Logger != nil {
		app = append(app, WithLogger(p.Logger))
	}
	if p.MeterProvider != nil {
		app = append(app, WithMeterProvider(p.MeterProvider))
	}
	r := NewRelay(p.DB, p.Broker, append(app, opts...)...)
	var cancel context.CancelFunc
	done := make(chan error, 1)
	p.Lifecycle.Append(fx.Hook{
		OnStart: func(context.Context) error {
			if r.err != nil {
				return r.err
			}
			// The relay runs on a context of its own, not the start's.
			var ctx context.Context
			ctx, cancel = context.WithCancel(context.Background())
			go func() { done <- r.Run(ctx) }()
			return nil
		},
		OnStop: func(ctx context.Context) error {
			cancel()
			select {
			case err := <-done:
				return err
			case <-ctx.Done():
				return fmt.Errorf("outbox: stop: the relay's batch did not finish: %w", ctx.Err())
			}
		},
	})
}

// AsSender provides the app's P, an interface type that mq.Sender
// satisfies (one embedding it), as an outbox sender to exchange
// (Outbox.Sender): its Publish writes to the outbox within the
// transaction in its context. It is fxmodule.AsPublisher's counterpart, so
// code written against P publishes through the broker or through the
// outbox by wiring alone. Needs Module (for the *Outbox).
func AsSender[P any](exchange string) fx.Option {
	pt := reflect.TypeFor[P]()
	if pt.Kind() != reflect.Interface || !reflect.TypeFor[sender]().Implements(pt) {
		return fx.Error(fmt.Errorf("outbox.AsSender: %v must be an interface type that mq.Sender satisfies (for instance one embedding mq.Sender)", pt))
	}
	return fx.Provide(func(o *Outbox) P { return any(o.Sender(exchange)).(P) })
}
