// Package fxmodule wires AceMQ into a go.uber.org/fx application: it
// provides the [*mq.Broker], collects topology fragments, consumers and
// shared middleware through value groups, and drives connection, declaration
// and consumers from the app's lifecycle.
//
// # What it owns
//
// The fx wiring, and the checks only a whole app's wiring can make (the
// retry policy written once, every consumer's queue declared or present,
// shared middleware placed by order). Everything else it does is a call
// into packages mq, topology and middleware that a service without fx
// makes itself ([mq.New], [mq.Broker.Start], [mq.Broker.Declare],
// [mq.Broker.Consume], [middleware.Standard], [mq.Consumer.Stop],
// [mq.Broker.Close]); see examples/plain. [ReadyHandler] is
// [mq.Broker.Check] over HTTP, for any broker, with the readiness checks
// of what else the app needs ([Check]): those given to it, and those an
// fx app fed with [AsCheck], which the module keeps for the app's broker.
// It runs the checks; what they check is their owners' (package outbox's
// database, say).
//
// # What it must not touch
//
// It provides nothing it does not own (no logger, no TracerProvider, no
// MeterProvider) and bundles no other module.
//
// # Use
//
//	fx.New(
//		fx.Supply(mq.Config{URLs: []string{url}}),
//		fxmodule.Module,
//		fxmodule.AsTopology(func() *topology.Topology {
//			return topology.New().
//				Exchange("orders-events").
//				Queue("shipping.orders", topology.DeadLetter(), topology.Retry(policy)).
//				Binding("shipping.orders", "orders-events", "order.placed")
//		}),
//		fxmodule.AsConsumer(func(s *Shipping) fxmodule.Consumer {
//			// middleware.Standard with the policy the topology declares
//			return fxmodule.Consumer{Queue: "shipping.orders", Handler: s, Standard: true}
//		}),
//		fxmodule.AsPublisher[OrderEvents]("orders-events"), // type OrderEvents interface{ mq.Sender }
//		fxmodule.AsMiddleware(10, NewAudit), // around every consumer: func NewAudit(db *sql.DB) mq.Middleware
//		fxmodule.AsMiddleware(20, metrics),  // a value will do; the lower order is further out
//	)
//
// [Module] requires an mq.Config from the app; its Logger is the one place
// the broker takes a logger from (an app that provides a *slog.Logger but
// leaves Config.Logger nil fails fx.New, told to set it). It takes, when
// the app has them, a trace.TracerProvider and a metric.MeterProvider:
// given either provider, the broker is instrumented with otelmq (a
// provider that is not given defaults to the global one). Provide those as the interface types, e.g.
// fx.Annotate(sdktrace.NewTracerProvider, fx.As(new(trace.TracerProvider))).
//
// # Value groups
//
// The helpers hide the group tags: [AsTopology], [AsConsumer] and
// [AsMiddleware] take constructors (any function fx can call, parameter
// objects welcome) that return a *topology.Topology fragment, a Consumer or
// an mq.Middleware, optionally with an error. A constructor returning any other type fails fx.New with an error
// naming it, rather than silently feeding nothing (the groups carry
// concrete types, so fx.As, which casts to interfaces, has nothing to do).
// Every fragment is merged into one topology (topology.New().Merge) and
// validated as a whole while the app is built, so a mistake in any
// fragment, or two fragments declaring one queue differently, fails fx.New
// with all the mistakes at once. fx hands a value group over in a random
// order, so the module sorts what it gets (fragments by their printout,
// consumers by queue): declaration and start go the same way on every run.
// The topology is declared through [mq.Broker.Declare], so the broker
// declares again what RabbitMQ forgets of it (exclusive and auto-delete
// queues after a reconnect, a queue deleted under its consumer) unless
// mq.Config.NoRedeclare is set.
//
// [AsMiddleware] wraps every consumer's handler in the middleware its
// constructor returns (or the middleware given), outside each consumer's
// own (Consumer.Standard, Consumer.Options). It may be given by several
// modules; each says its order (lower is further out), because order never
// comes from the order fx builds a group in. Two with one order fail
// fx.New naming both places.
//
// # The retry policy, written once
//
// A consumer with Standard set runs middleware.Standard with the policy the
// merged topology declares for its queue (topology.Retry), so the rungs it
// publishes to are the rungs the topology declares. A consumer that brings
// its own ladder (middleware.Standard(p) in Options) must run the policy
// the topology declares, if it declares one: a disagreement fails fx.New
// naming both policies. Either way the app fails to build rather than
// declaring one set of rungs and publishing to another.
//
// # The inbox
//
// A consumer with Inbox set runs its handler in the app's idempotent
// inbox, innermost (inside Standard's ladder: each attempt a transaction
// of its own). The inbox comes from outbox.Module (through [AsInbox]),
// with the schema given to that module once; this package does not import
// the outbox or its database driver. A consumer with Inbox set in an app
// without one fails fx.New. A test runs such a consumer as the app does,
// the test's inbox in the app's place, with fxmoduletest.ConsumerWithInbox.
//
// # Publishers and health
//
// [AsPublisher] provides a publisher to an exchange as an interface type the
// app names, so a test supplies a fake (fxmoduletest.Publisher). To a
// topic, fanout or headers exchange of the app's topology it is an event
// publisher and allows unroutable publishes (an event nobody subscribes to
// yet is normal); to the default or a direct exchange it is a command
// publisher and stays mandatory ([PublisherOptions]; docs/contract.md,
// "Events and commands"). Publishers are closed with the broker, after
// every consumer has drained.
//
// # The dead-letter console
//
// [WithConsole] provides an *ops.Console that watches every queue the merged
// topology gives a .dlq or .parked, logs operator actions to the module's
// logger and closes at stop before the broker; the service mounts it on
// its own admin server (the module serves nothing itself).
//
// # Testing
//
// Package fxmoduletest runs a [Consumer] through exactly the chain the module
// builds for it ([ConsumerOptions], the function the module itself calls) on
// an mqtest consumer, and fakes an [AsPublisher] publisher with the options
// the module would give it.
// ReadyHandler serves /readyz from Broker.Check (connected, not blocked,
// every consumer subscribed) and the app's readiness checks: [AsCheck]
// feeds a [Check] of something else the app needs (package outbox feeds
// its database's), which ReadyHandler(b) runs for the app's broker at
// every probe, each within [CheckTimeout]; a failing check makes the
// answer 503 with its name and reason, and a passing one may report a
// detail (how far behind the outbox's relay is).
//
// # Lifecycle
//
// Hooks run in dependency order. On start: connect (Broker.Start), then
// check that every consumer's queue is declared by the merged topology or
// exists on the broker (a consumer of a queue that is neither fails start
// naming it, before anything is declared), then declare the merged
// topology, then start every consumer (Broker.Consume,
// which returns once it is subscribed). On stop, in reverse: stop every
// consumer at once, each draining its in-flight handlers within the stop
// context, then close the broker (publishers, then the connection). A
// message whose handler outlasts the stop context is not acknowledged: the
// broker returns it to its queue when the channel closes.
//
// Start honours the start context (fx.StartTimeout, 15 s by default): a
// broker that does not answer fails start with the connect error (the URL
// redacted, the last dial error named) shortly before the timeout, instead
// of hanging, and a declaration the broker refuses fails start naming what
// was refused (errors.Is(err, mq.ErrPreconditionFailed) for a queue that
// exists with other arguments). A start that fails stops the consumers it
// started and closes the broker itself, since fx does not roll back once
// the start context has ended. Likewise, when consumers cannot drain within
// the stop context, the broker is still closed. No goroutine lives on the
// start context: the broker and its consumers run on contexts of their own
// that end at Close and Stop.
//
// A start that fails after the module's own has succeeded — a later hook
// outlasting the start context — is not seen by the module: fx (v1.24)
// then runs no stop hook at all, and the module cannot tell that start
// context's end from the end of one that outlives a successful start. The
// consumers keep running and the connection stays open until the process
// exits. fx.App.Run exits it; a program that calls App.Start itself
// should exit when it fails, or give the later hooks the time they need.
//
// # A consumer that gives up
//
// A consumer that ends on its own with an error — with mq.WithGiveUpAfter,
// one that could not resubscribe for that long, e.g. its queue was deleted;
// or one whose queue turned out to be a stream declared elsewhere, at its
// first delivery (mq.ErrInvalid) — is logged (acemq.consumer.ended) and
// asks the app to shut down with exit code 1 through fx.Shutdowner, rather
// than leave a half-dead service running. Consumers without
// WithGiveUpAfter otherwise retry forever and never do.
package fxmodule
