package outbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync/atomic"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/fx"

	"github.com/acemq/acemq-go/fxmodule"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/topology"
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
// so does a database that cannot be reached. So does an exchange an
// AsSender sender names that the app's topology does not declare and the
// broker does not have (a passive declare), naming it. Module creates
// nothing: create the tables with Schema.Create in a start hook of the
// *sql.DB's provider (Module asks for the *sql.DB, so that hook runs
// before its check; docs/outbox.md shows one), or take Schema.SQL into
// your migrations.
//
// The relay publishes each row by fxmodule.AsPublisher's rule, with the
// app's topology (WithTopology): to its topic, fanout or headers exchanges
// an event, dropped when no queue is bound for it; otherwise a command.
// Its readiness check is Relay.Check.
//
// Given after fxmodule.Module in fx.New, the relay starts after the
// broker has connected and the topology is declared, and stops before the
// consumers and the broker do: Stop lets the batch in flight finish (its
// confirms, its deletes) within the stop context; committed rows it did
// not reach stay in the table for the next start. The app's
// metric.MeterProvider (the relay's and the inbox's) is used when it has
// one; options given here win. The relay logs through the broker's logger
// and the inbox through each consumer's, both mq.Config.Logger.
func Module(opts ...Option) fx.Option {
	outboxOpts, relayOpts, inboxOpts := only[OutboxOption](opts), only[RelayOption](opts), only[InboxOption](opts)
	return fx.Module("acemq.outbox",
		// Built with the app, not here: New reads the global propagator,
		// which an app may set while it is built.
		fx.Provide(func() *Outbox { return New(outboxOpts...) }),
		fx.Provide(fx.Private, newStartCheck),
		fxmodule.AsInbox(func(p inboxParams) mq.Middleware { return p.Check.inbox(p, inboxOpts) }),
		fx.Provide(fx.Private, func(p relayParams) *Relay { return runRelay(p, relayOpts) }),
		fx.Invoke(func(*Relay) {}),
		fxmodule.AsCheck(func(r *Relay) fxmodule.Check { return r.Check() }),
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

// startCheck checks, at start, in a hook of its own that runs before the
// consumers' and the relay's (it is built before either asks for it) and
// after the broker's (it asks for the broker): the outbox table always,
// the inbox table when a consumer runs the inbox, and the exchanges the
// app's AsSender senders name (checkSenders).
type startCheck struct {
	inUsed atomic.Bool        // the inbox wraps a handler
	topo   *topology.Topology // the app's, merged; nil: none
}

type startParams struct {
	fx.In

	Lifecycle fx.Lifecycle
	DB        *sql.DB
	Outbox    *Outbox
	// Broker is asked for so that its connecting hook runs before this
	// one, which looks for the senders' exchanges on it.
	Broker *mq.Broker
	// The app's topology (fxmodule.AsTopology's fragments) and the
	// exchanges its AsSender senders name.
	Topologies []*topology.Topology `group:"acemq.topologies"`
	Senders    []senderExchange     `group:"acemq.outbox.senders"`
}

func newStartCheck(p startParams) *startCheck {
	c := &startCheck{}
	if frags := slices.DeleteFunc(slices.Clone(p.Topologies), func(t *topology.Topology) bool { return t == nil }); len(frags) > 0 {
		c.topo = topology.New().Merge(frags...)
	}
	ob := p.Outbox
	p.Lifecycle.Append(fx.Hook{OnStart: func(ctx context.Context) error {
		if ob.err != nil {
			return ob.err
		}
		if err := ob.schema.check(ctx, p.DB, true, c.inUsed.Load()); err != nil {
			return err
		}
		return checkSenders(ctx, p.Broker, c.topo, p.Senders)
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
	// relay's; it also holds the app's topology.
	Check         *startCheck
	DB            *sql.DB
	Broker        *mq.Broker
	MeterProvider metric.MeterProvider `optional:"true"`
}

// senderExchange is an exchange an AsSender sender publishes to.
type senderExchange string

// runRelay is the app's relay: NewRelay with the app's MeterProvider and
// topology (WithTopology: a row to the app's topic, fanout or headers
// exchange is an event) and then the module's options, run with the
// app's lifecycle.
func runRelay(p relayParams, opts []RelayOption) *Relay {
	var app []RelayOption
	if p.MeterProvider != nil {
		app = append(app, WithMeterProvider(p.MeterProvider))
	}
	if p.Check.topo != nil {
		app = append(app, WithTopology(p.Check.topo))
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
	return r
}

// checkSenders makes sure every exchange an AsSender sender names is
// there to publish to: declared by the app's topology t (fxmodule.Module
// declares it at start, before the relay starts), or found on the broker by a passive declare (an
// exchange declared by someone else). Any other, a misspelled name say,
// fails the start naming it: each of its rows would otherwise be refused
// with 404 NOT_FOUND by the relay, long after the write was accepted.
func checkSenders(ctx context.Context, b *mq.Broker, t *topology.Topology, senders []senderExchange) error {
	declared := map[string]bool{"": true} // the default exchange always exists
	if t != nil {
		for _, e := range t.Exchanges() {
			declared[e.Name] = true
		}
	}
	var errs []error
	for _, name := range slices.Compact(slices.Sorted(slices.Values(senders))) {
		if declared[string(name)] {
			continue
		}
		if err := exchangeExists(ctx, b, string(name)); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// exchangeExists declares exchange passively on a throwaway channel: nil
// when it exists.
func exchangeExists(ctx context.Context, b *mq.Broker, exchange string) error {
	ch, err := b.Channel(ctx)
	if err != nil {
		return fmt.Errorf("outbox: start: look for the exchange %q that outbox.AsSender names: %w", exchange, err)
	}
	done := make(chan error, 1)
	go func() { done <- ch.ExchangeDeclarePassive(exchange, "", false, false, false, false, nil) }()
	select {
	case err = <-done:
	case <-ctx.Done():
		err = ctx.Err()
	}
	_ = ch.Close() // after a refusal, closed already
	var ae *amqp.Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ae) && ae.Code == amqp.NotFound:
		return fmt.Errorf("outbox: start: the exchange %q that outbox.AsSender names does not exist, and the app's topology does not declare it: correct the name, or declare it (fxmodule.AsTopology)", exchange)
	}
	return fmt.Errorf("outbox: start: look for the exchange %q that outbox.AsSender names: %w", exchange, err)
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
	return fx.Options(
		fx.Provide(func(o *Outbox) P { return any(o.Sender(exchange)).(P) }),
		fx.Provide(fx.Annotate(func() senderExchange { return senderExchange(exchange) }, fx.ResultTags(`group:"acemq.outbox.senders"`))),
	)
}
