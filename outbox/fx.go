package outbox

import (
	"context"
	"database/sql"
	"fmt"
	"reflect"
	"sync/atomic"

	"go.opentelemetry.io/otel/metric"
	"go.uber.org/fx"

	"github.com/acemq/acemq-go/fxmodule"
	"github.com/acemq/acemq-go/mq"
)

// Module wires the outbox and the inbox into a go.uber.org/fx app that
// has an *sql.DB (opened with the pgx driver) and the *mq.Broker of
// fxmodule.Module: it provides the *Outbox (New), runs a Relay (NewRelay)
// with the app's lifecycle, and provides the app's inbox (Inbox, through
// fxmodule.AsInbox), which every fxmodule.Consumer with Inbox set runs
// next to its handler. Each option goes to the constructors it applies
// to, so WithSchema, given once here, names the tables of all three.
//
// Start checks the database first (Schema.Check): the outbox table, and
// the inbox table when a consumer runs the inbox. One that is missing or
// of another shape fails the start, before any consumer or the relay
// starts, with an error matching ErrSchema that names it with its schema;
// so does a database that cannot be reached. Module creates nothing: run
// Schema.Create before (at start-up, say in an fx.Invoke given before
// Module) or take Schema.SQL into your migrations.
//
// Given after fxmodule.Module in fx.New, the relay starts after the
// broker has connected and the topology is declared, and stops before the
// consumers and the broker do: Stop lets the batch in flight finish (its
// confirms, its deletes) within the stop context; committed rows it did
// not reach stay in the table for the next start. The app's
// metric.MeterProvider (the relay's and the inbox's) is used when it has
// one; options given here win. The relay logs through the broker's logger
// and the inbox through each consumer's (fxmodule gives the app's
// *slog.Logger to the broker).
func Module(opts ...Option) fx.Option {
	outboxOpts, relayOpts, inboxOpts := only[OutboxOption](opts), only[RelayOption](opts), only[InboxOption](opts)
	return fx.Module("acemq.outbox",
		// Built with the app, not here: New reads the global propagator,
		// which an app may set while it is built.
		fx.Provide(func() *Outbox { return New(outboxOpts...) }),
		fx.Provide(fx.Private, newStartCheck),
		fxmodule.AsInbox(func(p inboxParams) mq.Middleware { return p.Check.inbox(p, inboxOpts) }),
		fx.Invoke(func(p relayParams) { runRelay(p, relayOpts) }),
		fxmodule.AsCheck(func(db *sql.DB, ob *Outbox) fxmodule.Check { return RelayCheck(db, ob.schema) }),
		fxmodule.AsCheck(func(db *sql.DB, ob *Outbox, c *startCheck) fxmodule.Check { return c.inboxCheck(db, ob.schema) }),
	)
}

// inboxCheck is InboxCheck once a consumer runs the inbox; until then
// (an app whose consumers do not use it) it reports that and passes.
func (c *startCheck) inboxCheck(db *sql.DB, s Schema) fxmodule.Check {
	ic := InboxCheck(db, s)
	return fxmodule.Check{Name: ic.Name, Check: func(ctx context.Context) (string, error) {
		if !c.inUsed.Load() {
			return "not used by any consumer", nil
		}
		return ic.Check(ctx)
	}}
}

// startCheck checks the tables at start, in a hook of its own that runs
// before the consumers' and the relay's (it is built before either asks
// for it): the outbox table always, the inbox table when a consumer
// runs the inbox.
type startCheck struct {
	inUsed atomic.Bool // the inbox wraps a handler
}

func newStartCheck(lc fx.Lifecycle, db *sql.DB, ob *Outbox) *startCheck {
	c := &startCheck{}
	lc.Append(fx.Hook{OnStart: func(ctx context.Context) error {
		if ob.err != nil {
			return ob.err
		}
		return ob.schema.check(ctx, db, true, c.inUsed.Load())
	}})
	return c
}

type inboxParams struct {
	fx.In

	Check         *startCheck
	DB            *sql.DB
	MeterProvider metric.MeterProvider `optional:"true"`
}

// inbox is the app's inbox: Inbox with the module's options (after the
// app's MeterProvider), marking the inbox table as one to check when it
// wraps a handler. fxmodule wraps each consumer's chain while the app is
// built, before any start hook runs.
func (c *startCheck) inbox(p inboxParams, opts []InboxOption) mq.Middleware {
	var app []InboxOption
	if p.MeterProvider != nil {
		app = append(app, WithMeterProvider(p.MeterProvider))
	}
	mw := Inbox(p.DB, append(app, opts...)...)
	return func(next mq.Handler) mq.Handler {
		c.inUsed.Store(true)
		return mw(next)
	}
}

type relayParams struct {
	fx.In

	Lifecycle fx.Lifecycle
	// Check is asked for so its hook is appended, and runs, before the
	// relay's.
	Check         *startCheck
	DB            *sql.DB
	Broker        *mq.Broker
	MeterProvider metric.MeterProvider `optional:"true"`
}

func runRelay(p relayParams, opts []RelayOption) {
	var app []RelayOption
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
