package fxmodule

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"sync"
	"time"
	"weak"

	"go.uber.org/fx"

	"github.com/acemq/acemq-go/mq"
)

// groupChecks is the value group AsCheck feeds.
const groupChecks = "acemq.checks"

// Check is a readiness check of something the app needs besides the
// broker (the outbox's database, say), run by ReadyHandler at every probe.
// Feed it to the app with AsCheck; package outbox feeds its own.
type Check struct {
	// Name says what is checked; it begins the check's line in the
	// answer. Required.
	Name string
	// Check answers for it within ctx (ReadyHandler bounds it at
	// CheckTimeout): an error makes the app not ready, with the error's
	// text as the reason; detail ("" for none) is worth reporting either
	// way (how far behind something is, say). It must return once ctx
	// ends: ReadyHandler answers without it then, and the goroutine it
	// runs on lasts until it returns. Required.
	Check func(ctx context.Context) (detail string, err error)
}

// CheckTimeout bounds each Check at a probe: one that has not answered by
// then makes the app not ready.
const CheckTimeout = 5 * time.Second

// AsCheck adds a readiness check to the app. ctor is a constructor fx can
// call (its parameters are injected) returning a Check, optionally with an
// error. ReadyHandler, given the app's broker, runs every check the app
// was given, so /readyz covers them without the app naming them again. A
// Check without a Name or a func fails fx.New.
func AsCheck(ctor any) fx.Option {
	if err := checkConstructor("AsCheck", ctor, reflect.TypeFor[Check]()); err != nil {
		return fx.Error(err)
	}
	return fx.Provide(fx.Annotate(ctor, fx.ResultTags(`group:"`+groupChecks+`"`)))
}

type checkParams struct {
	fx.In

	Broker *mq.Broker
	Checks []Check `group:"acemq.checks"`
}

// attachChecks hands the app's checks to ReadyHandler for the app's
// broker.
func attachChecks(p checkParams) error {
	var errs []error
	for _, c := range p.Checks {
		switch {
		case c.Name == "":
			errs = append(errs, errors.New("fxmodule: a readiness check's Name is empty"))
		case c.Check == nil:
			errs = append(errs, fmt.Errorf("fxmodule: readiness check %q: Check is nil", c.Name))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if len(p.Checks) > 0 {
		attached.set(p.Broker, p.Checks)
	}
	return nil
}

// attached is the checks of each broker an fx app built, for
// ReadyHandler(b). It holds its brokers weakly: an entry goes when its
// broker is collected (a check whose func holds the broker keeps it,
// and its entry, for the life of the process).
var attached = &checkRegistry{m: map[weak.Pointer[mq.Broker]][]Check{}}

type checkRegistry struct {
	mu sync.Mutex
	m  map[weak.Pointer[mq.Broker]][]Check
}

func (r *checkRegistry) set(b *mq.Broker, cs []Check) {
	k := weak.Make(b)
	r.mu.Lock()
	_, had := r.m[k]
	r.m[k] = cs
	r.mu.Unlock()
	if !had {
		runtime.AddCleanup(b, r.drop, k)
	}
}

func (r *checkRegistry) drop(k weak.Pointer[mq.Broker]) {
	r.mu.Lock()
	delete(r.m, k)
	r.mu.Unlock()
}

func (r *checkRegistry) get(b *mq.Broker) []Check {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.m[weak.Make(b)]
}
