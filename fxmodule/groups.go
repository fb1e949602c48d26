package fxmodule

import (
	"fmt"
	"reflect"
	"runtime"
	"slices"

	"go.uber.org/fx"

	"github.com/acemq/acemq-go/middleware"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/topology"
)

// The value groups the helpers feed. They are an implementation detail:
// feed them through AsTopology, AsConsumer and AsMiddleware.
const (
	groupTopologies = "acemq.topologies"
	groupConsumers  = "acemq.consumers"
	groupMiddleware = "acemq.middleware"
)

// Consumer is a consumer definition: the queue, the handler, and the
// consumer's own options ([middleware.Standard], [mq.WithConcurrency], …).
// Feed it to the module with [AsConsumer].
type Consumer struct {
	// Queue is the queue consumed. Required; the consumer does not declare
	// it (a topology fragment does).
	Queue string
	// Handler handles each delivery. Required.
	Handler mq.Handler
	// Options configure the consumer. Middleware they add sits inside the
	// middleware given to [AsMiddleware], and inside Standard's.
	Options []mq.ConsumerOption
	// Standard wraps Handler in [middleware.Standard] with the retry policy
	// the merged topology declares for Queue ([topology.Retry]): the policy
	// is written once, in the topology, and the rungs the consumer
	// publishes to are the rungs the topology declares. The app fails to
	// build when the topology gives Queue no policy, or when Options run a
	// retry ladder of their own as well. Default false: the consumer's
	// middleware is what Options say (a middleware.Standard(p) there must
	// then agree with the topology's policy, or the app fails to build).
	Standard bool
	// StandardOptions adjust the Standard stack ([middleware.WithTimeout],
	// …). Used only with Standard.
	StandardOptions []middleware.StandardOption
	// Inbox runs Handler in the app's inbox, which outbox.Module provides
	// (AsInbox) with the schema its relay uses: each attempt a database
	// transaction that records the message's key, a redelivery of a
	// recorded key acknowledged unhandled (see package outbox). The inbox
	// sits innermost, next to Handler: inside Standard's ladder and inside
	// the middleware Options add, so each attempt is a transaction of its
	// own. The app fails to build when Inbox is set and nothing provides
	// an inbox. Default false.
	Inbox bool
}

// AsTopology adds a topology fragment to the app's topology. ctor is a
// constructor fx can call (its parameters are injected) returning a
// *[topology.Topology], optionally with an error; a *topology.Topology value
// is accepted too. Every fragment is merged with the others and validated
// with them. A nil fragment adds nothing.
func AsTopology(ctor any) fx.Option {
	if t, ok := ctor.(*topology.Topology); ok {
		ctor = func() *topology.Topology { return t }
	}
	if err := checkConstructor("AsTopology", ctor, reflect.TypeFor[*topology.Topology]()); err != nil {
		return fx.Error(err)
	}
	return fx.Provide(fx.Annotate(ctor, fx.ResultTags(`group:"`+groupTopologies+`"`)))
}

// AsConsumer adds a consumer to the app. ctor is a constructor fx can call
// (its parameters are injected) returning a [Consumer], optionally with an
// error. The consumer starts after the topology is declared and stops,
// draining, before the broker closes.
func AsConsumer(ctor any) fx.Option {
	if err := checkConstructor("AsConsumer", ctor, reflect.TypeFor[Consumer]()); err != nil {
		return fx.Error(err)
	}
	return fx.Provide(fx.Annotate(ctor, fx.ResultTags(`group:"`+groupConsumers+`"`)))
}

// AsMiddleware wraps the handler of every consumer of the app in a
// middleware, outside each consumer's own. ctor is a constructor fx can
// call (its parameters are injected, so a middleware that needs the app's
// *sql.DB asks for it) returning an [mq.Middleware], optionally with an
// error; an mq.Middleware value is accepted too. A nil middleware adds
// nothing. It may be given any number of times, from any module; order
// places them, since fx builds them in no fixed order: a lower order is
// further out. So tracing given at order 10 in one module sits outside
// metrics given at order 20 in another. Two with the same order fail
// fx.New naming both places, since their order would otherwise be up to
// fx; so does a constructor's error, naming where AsMiddleware was given.
func AsMiddleware(order int, ctor any) fx.Option {
	at := "unknown place"
	if _, file, line, ok := runtime.Caller(1); ok {
		at = fmt.Sprintf("%s:%d", file, line)
	}
	mwType := reflect.TypeFor[mq.Middleware]()
	if t := reflect.TypeOf(ctor); t != nil && t.ConvertibleTo(mwType) {
		mw := reflect.ValueOf(ctor).Convert(mwType).Interface().(mq.Middleware)
		ctor = func() mq.Middleware { return mw }
	}
	if err := checkConstructor("AsMiddleware", ctor, mwType); err != nil {
		return fx.Error(fmt.Errorf("%w (at %s)", err, at))
	}
	// A function of ctor's parameters, so fx injects what ctor asks for,
	// returning the middleware with its order and its place.
	cv, ct := reflect.ValueOf(ctor), reflect.TypeOf(ctor)
	in := make([]reflect.Type, ct.NumIn())
	for i := range in {
		in[i] = ct.In(i)
	}
	ft := reflect.FuncOf(in, []reflect.Type{reflect.TypeFor[middlewareSet](), errorType}, ct.IsVariadic())
	build := reflect.MakeFunc(ft, func(args []reflect.Value) []reflect.Value {
		var outs []reflect.Value
		if ct.IsVariadic() {
			outs = cv.CallSlice(args)
		} else {
			outs = cv.Call(args)
		}
		set := middlewareSet{order: order, at: at}
		var err error
		if len(outs) == 2 && !outs[1].IsNil() {
			err = fmt.Errorf("fxmodule.AsMiddleware (at %s): %w", at, outs[1].Interface().(error))
		} else {
			set.mw, _ = outs[0].Interface().(mq.Middleware)
		}
		return []reflect.Value{reflect.ValueOf(set), reflect.ValueOf(&err).Elem()}
	})
	return fx.Provide(fx.Annotate(build.Interface(), fx.ResultTags(`group:"`+groupMiddleware+`"`)))
}

// nameInbox names the app's inbox among the app's values (AsInbox).
const nameInbox = "acemq.inbox"

// AsInbox provides the app's inbox: the middleware every Consumer with
// Inbox set runs next to its handler. ctor is a constructor fx can call
// (its parameters are injected) returning an mq.Middleware, optionally
// with an error. outbox.Module gives it, so an app rarely calls AsInbox
// itself; an app has at most one (a second fails fx.New).
func AsInbox(ctor any) fx.Option {
	if err := checkConstructor("AsInbox", ctor, reflect.TypeFor[mq.Middleware]()); err != nil {
		return fx.Error(err)
	}
	return fx.Provide(fx.Annotate(ctor, fx.ResultTags(`name:"`+nameInbox+`"`)))
}

// middlewareSet is what one AsMiddleware gives.
type middlewareSet struct {
	order int
	mw    mq.Middleware // nil: none
	at    string        // where AsMiddleware was called
}

// AsPublisher provides a publisher to exchange as P, an interface type
// the app names (a test supplies a fake of it instead, fxmoduletest.Publisher
// say):
//
//	type OrderEvents interface{ mq.Sender }
//	fxmodule.AsPublisher[OrderEvents]("orders-events")
//
// The publisher is built with [PublisherOptions]: to an exchange the app's
// topology declares as topic, fanout or headers it is an event publisher
// and allows unroutable publishes (an event nobody subscribes to yet is
// normal); to the default exchange, a direct exchange or one the topology
// does not declare it is a command publisher and stays mandatory (a
// command no queue takes fails with [mq.ErrUnroutable]). opts come after the
// default: [mq.Mandatory]() makes an event publisher mandatory again.
//
// P must be an interface that *[mq.Publisher] implements ([mq.Sender] itself
// will do for an app with one publisher); anything else fails fx.New
// naming it. The publisher opens its channel on first use and is closed
// when the broker closes at stop, after every consumer has drained, so a
// handler that publishes can finish. Each P may be provided once.
func AsPublisher[P any](exchange string, opts ...mq.PublisherOption) fx.Option {
	pt := reflect.TypeFor[P]()
	if pt.Kind() != reflect.Interface || !reflect.TypeFor[*mq.Publisher]().Implements(pt) {
		return fx.Error(fmt.Errorf("fxmodule.AsPublisher: %v must be an interface type that *mq.Publisher implements (for instance one embedding mq.Sender)", pt))
	}
	opts = slices.Clone(opts)
	return fx.Provide(func(p publisherParams) P {
		return any(p.Broker.Publisher(exchange, PublisherOptions(merged(p.Topologies), exchange, opts...)...)).(P)
	})
}

// publisherParams are what AsPublisher's publisher is built from.
type publisherParams struct {
	fx.In

	Broker     *mq.Broker
	Topologies []*topology.Topology `group:"acemq.topologies"`
}

// PublisherOptions returns the options [AsPublisher] builds a publisher to
// exchange with, given the app's topology t (nil: none): [mq.AllowUnroutable]
// first when t declares exchange as a topic, fanout or headers exchange —
// an event publisher, whose event may have no audience yet — and then
// opts. A publisher to the default exchange (""), to a direct exchange or
// to an exchange t does not declare sends commands and stays mandatory, as
// every [mq.Publisher] is by default. fxmoduletest.Publisher gives its fake
// these same options.
func PublisherOptions(t *topology.Topology, exchange string, opts ...mq.PublisherOption) []mq.PublisherOption {
	out := make([]mq.PublisherOption, 0, len(opts)+1)
	if t != nil && exchange != "" {
		for _, e := range t.Exchanges() {
			if e.Name == exchange && (e.Kind == topology.Topic || e.Kind == topology.Fanout || e.Kind == topology.Headers) {
				out = append(out, mq.AllowUnroutable())
			}
		}
	}
	return append(out, opts...)
}

var errorType = reflect.TypeFor[error]()

// checkConstructor makes sure ctor is a function returning want, or want
// and an error, so that a constructor of the wrong type fails loudly
// instead of feeding a group nobody reads.
func checkConstructor(helper string, ctor any, want reflect.Type) error {
	t := reflect.TypeOf(ctor)
	if t == nil || t.Kind() != reflect.Func || reflect.ValueOf(ctor).IsNil() {
		return fmt.Errorf("fxmodule.%s: want a constructor (a function returning %v), got %T", helper, want, ctor)
	}
	ok := (t.NumOut() == 1 || t.NumOut() == 2 && t.Out(1) == errorType) && t.Out(0) == want
	if !ok {
		return fmt.Errorf("fxmodule.%s: constructor %v must return %v or (%v, error)", helper, t, want, want)
	}
	return nil
}
