package fxmodule

import (
	"fmt"
	"reflect"
	"runtime"
	"slices"

	"go.uber.org/fx"

	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/topology"
)

// The value groups the helpers feed. They are an implementation detail:
// feed them through AsTopology, AsConsumer and WithMiddleware.
const (
	groupTopologies = "acemq.topologies"
	groupConsumers  = "acemq.consumers"
	groupMiddleware = "acemq.middleware"
)

// Consumer is a consumer definition: the queue, the handler, and the
// consumer's own options (middleware.Standard, mq.WithConcurrency, …).
// Feed it to the module with AsConsumer.
type Consumer struct {
	// Queue is the queue consumed. Required; the consumer does not declare
	// it (a topology fragment does).
	Queue string
	// Handler handles each delivery. Required.
	Handler mq.Handler
	// Options configure the consumer. Middleware they add sits inside the
	// middleware given to WithMiddleware.
	Options []mq.ConsumerOption
}

// AsTopology adds a topology fragment to the app's topology. ctor is a
// constructor fx can call (its parameters are injected) returning a
// *topology.Topology, optionally with an error; a *topology.Topology value
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
// (its parameters are injected) returning a Consumer, optionally with an
// error. The consumer starts after the topology is declared and stops,
// draining, before the broker closes.
func AsConsumer(ctor any) fx.Option {
	if err := checkConstructor("AsConsumer", ctor, reflect.TypeFor[Consumer]()); err != nil {
		return fx.Error(err)
	}
	return fx.Provide(fx.Annotate(ctor, fx.ResultTags(`group:"`+groupConsumers+`"`)))
}

// WithMiddleware wraps the handler of every consumer of the app in mws, in
// exactly this order (the first outermost), outside each consumer's own
// options. Give it once per app: given twice, fx.New fails naming both
// places, since the order of the two would otherwise be up to fx.
func WithMiddleware(mws ...mq.Middleware) fx.Option {
	set := middlewareSet{mws: slices.Clone(mws), at: "unknown place"}
	if _, file, line, ok := runtime.Caller(1); ok {
		set.at = fmt.Sprintf("%s:%d", file, line)
	}
	return fx.Provide(fx.Annotate(func() middlewareSet { return set }, fx.ResultTags(`group:"`+groupMiddleware+`"`)))
}

// middlewareSet is one WithMiddleware call.
type middlewareSet struct {
	mws []mq.Middleware
	at  string // where WithMiddleware was called
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
