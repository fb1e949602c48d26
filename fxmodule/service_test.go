package fxmodule

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"

	"github.com/acemq/acemq-go/middleware"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/retry"
	"github.com/acemq/acemq-go/topology"
)

var (
	declared = retry.Exponential(4, 10*time.Second)
	other    = retry.Exponential(5, 10*time.Second)
)

func runnerFor(t *testing.T, topo *topology.Topology, sets []middlewareSet, cs ...Consumer) (*runner, error) {
	t.Helper()
	b := mq.New(cfg())
	t.Cleanup(func() { _ = b.Close(context.Background()) })
	var frags []*topology.Topology
	if topo != nil {
		frags = append(frags, topo)
	}
	return newRunner(runParams{Lifecycle: fxtest.NewLifecycle(t), Broker: b, Topologies: frags, Consumers: cs, Middleware: sets})
}

// policyOf is the retry policy the consumer's chain runs, as DeclareOnStart
// reads it.
func policyOf(t *testing.T, c Consumer) (retry.Policy, bool) {
	t.Helper()
	r, err := mq.NewRunner(c.Handler, nil, c.Options...)
	if err != nil {
		t.Fatal(err)
	}
	return r.RetryPolicy()
}

func TestMiddlewareFromSeveralModulesInOrder(t *testing.T) {
	var trail []string
	mark := func(name string) mq.Middleware {
		return func(next mq.Handler) mq.Handler {
			return mq.HandlerFunc(func(ctx context.Context, d *mq.Delivery) error {
				trail = append(trail, name)
				return next.Handle(ctx, d)
			})
		}
	}
	// Fed in the "wrong" order: the order values decide.
	r, err := runnerFor(t, nil, []middlewareSet{
		{order: 20, mw: mark("metrics"), at: "b.go:1"},
		{order: 10, mw: mark("tracing"), at: "a.go:1"},
		{order: 15, mw: mark("audit"), at: "c.go:1"},
	})
	if err != nil {
		t.Fatal(err)
	}
	_ = mq.Chain(noop, r.mws...).Handle(context.Background(), nil)
	if got := strings.Join(trail, " > "); got != "tracing > audit > metrics" {
		t.Fatalf("order %s, want tracing > audit > metrics", got)
	}
	// Through fx, from two modules: the app builds.
	app := fx.New(fx.NopLogger, fx.Supply(cfg()), Module, AsMiddleware(20, mark("m")), fx.Module("tracing", AsMiddleware(10, mark("t"))))
	if err := app.Err(); err != nil {
		t.Fatalf("fx.New with AsMiddleware from two modules: %v", err)
	}
}

func TestPolicyTakenFromTheTopology(t *testing.T) {
	topo := topology.New().Queue("orders", topology.DeadLetter(), topology.Retry(declared))
	r, err := runnerFor(t, topo, nil, Consumer{Queue: "orders", Handler: noop, Standard: true,
		StandardOptions: []middleware.StandardOption{middleware.WithTimeout(time.Second)}})
	if err != nil {
		t.Fatal(err)
	}
	p, ok := policyOf(t, r.consumers[0])
	if !ok || !p.Equal(declared) {
		t.Fatalf("consumer runs %v (ladder %v), want the topology's %v", p, ok, declared)
	}
}

func TestPolicyDisagreementNamesBoth(t *testing.T) {
	topo := topology.New().Queue("orders", topology.Retry(declared))
	_, err := runnerFor(t, topo, nil, Consumer{Queue: "orders", Handler: noop, Options: []mq.ConsumerOption{middleware.Standard(other)}})
	if err == nil || !strings.Contains(err.Error(), other.String()) || !strings.Contains(err.Error(), declared.String()) || !strings.Contains(err.Error(), `"orders"`) {
		t.Fatalf("newRunner: %v, want an error naming both policies and the queue", err)
	}
	// Agreeing is fine.
	if _, err := runnerFor(t, topo, nil, Consumer{Queue: "orders", Handler: noop, Options: []mq.ConsumerOption{middleware.Standard(declared)}}); err != nil {
		t.Fatalf("agreeing policies: %v", err)
	}
	// Through fx: the app fails to build.
	app := fx.New(fx.NopLogger, fx.Supply(cfg()), Module, AsTopology(topo),
		AsConsumer(func() Consumer {
			return Consumer{Queue: "orders", Handler: noop, Options: []mq.ConsumerOption{middleware.Standard(other)}}
		}))
	if app.Err() == nil || !strings.Contains(app.Err().Error(), "runs retry policy") {
		t.Fatalf("fx.New: %v", app.Err())
	}
}

func TestStandardNeedsOnePolicy(t *testing.T) {
	_, err := runnerFor(t, topology.New().Queue("orders", topology.DeadLetter()), nil, Consumer{Queue: "orders", Handler: noop, Standard: true})
	if err == nil || !strings.Contains(err.Error(), "declares no topology.Retry") {
		t.Fatalf("Standard without a topology policy: %v", err)
	}
	_, err = runnerFor(t, topology.New().Queue("orders", topology.Retry(declared)), nil,
		Consumer{Queue: "orders", Handler: noop, Standard: true, Options: []mq.ConsumerOption{middleware.Standard(declared)}})
	if err == nil || !strings.Contains(err.Error(), "retry ladder of their own") {
		t.Fatalf("Standard and a ladder in Options: %v", err)
	}
}

type orderEvents interface{ mq.Sender }

func TestAsPublisher(t *testing.T) {
	var p orderEvents
	app := fx.New(fx.NopLogger, fx.Supply(cfg()), Module, AsPublisher[orderEvents]("orders-events"), fx.Populate(&p))
	if err := app.Err(); err != nil {
		t.Fatal(err)
	}
	// The exchange shows in what the publisher refuses (the validator runs
	// at the call, before the broker is asked).
	err := p.Publish(t.Context(), "k", mq.Message{MessageId: strings.Repeat("i", 256)})
	if _, ok := p.(*mq.Publisher); !ok || !errors.Is(err, mq.ErrInvalid) || !strings.Contains(err.Error(), `exchange "orders-events"`) {
		t.Fatalf("provided %T (%v), want a *mq.Publisher to orders-events", p, err)
	}
	for name, opt := range map[string]fx.Option{
		"struct":        AsPublisher[mq.Message]("x"),
		"unimplemented": AsPublisher[interface{ Flush() }]("x"),
	} {
		t.Run(name, func(t *testing.T) {
			err := fx.New(fx.NopLogger, fx.Supply(cfg()), Module, opt).Err()
			if err == nil || !strings.Contains(err.Error(), "fxmodule.AsPublisher") {
				t.Fatalf("fx.New: %v", err)
			}
		})
	}
}

func TestReadyHandlerBeforeStart(t *testing.T) {
	b := mq.New(cfg())
	rec := httptest.NewRecorder()
	ReadyHandler(b).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "not started") {
		t.Fatalf("readyz before start: %d %q", rec.Code, rec.Body.String())
	}
	if err := b.Check(context.Background()); !errors.Is(err, mq.ErrNotReady) {
		t.Fatalf("Check before start: %v", err)
	}
	_ = b.Close(context.Background())
	if err := b.Check(context.Background()); !errors.Is(err, mq.ErrClosed) {
		t.Fatalf("Check after close: %v", err)
	}
}

// A middleware that needs what the app provides (a database, say) is
// given as a constructor, as AsTopology's and AsConsumer's are: fx
// injects its parameters. A middleware value is accepted too; order
// places both.
func TestAsMiddlewareConstructorGetsItsDependencies(t *testing.T) {
	type auditDB struct{ name string }
	var trail []string
	mark := func(name string) mq.Middleware {
		return func(next mq.Handler) mq.Handler {
			return mq.HandlerFunc(func(ctx context.Context, d *mq.Delivery) error {
				trail = append(trail, name)
				return next.Handle(ctx, d)
			})
		}
	}
	var r *runner
	// Module's constructors, without its fx.Private, so the test can reach
	// the runner.
	app := fxtest.New(t, fx.Supply(cfg()), fx.Supply(&auditDB{name: "audit"}), fx.Provide(New, newRunner),
		AsMiddleware(20, func(db *auditDB) mq.Middleware { return mark(db.name) }),
		AsMiddleware(10, mark("tracing")),
		AsMiddleware(30, func(*auditDB) (mq.Middleware, error) { return nil, nil }), // adds nothing
		fx.Populate(&r))
	if err := app.Err(); err != nil {
		t.Fatal(err)
	}
	_ = mq.Chain(noop, r.mws...).Handle(context.Background(), nil)
	if got := strings.Join(trail, " > "); got != "tracing > audit" {
		t.Fatalf("chain %s, want tracing > audit", got)
	}
	// A constructor's error fails fx.New, naming AsMiddleware and where it
	// was given.
	boom := fx.New(fx.NopLogger, fx.Supply(cfg()), Module,
		AsMiddleware(10, func() (mq.Middleware, error) { return nil, errors.New("no audit database") }))
	if err := boom.Err(); err == nil || !strings.Contains(err.Error(), "no audit database") || !strings.Contains(err.Error(), "fxmodule.AsMiddleware") || !strings.Contains(err.Error(), "service_test.go:") {
		t.Fatalf("fx.New: %v, want the constructor's error, naming AsMiddleware and where", err)
	}
}
