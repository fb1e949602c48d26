package fxmodule

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"go.uber.org/fx"

	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/topology"
)

// cleanupTimeout bounds the cleanup after a failed start, or after a stop
// whose context ended: the context fx gave has ended by then.
const cleanupTimeout = 10 * time.Second

type runParams struct {
	fx.In

	Lifecycle  fx.Lifecycle
	Shutdowner fx.Shutdowner
	Broker     *mq.Broker
	Topologies []*topology.Topology `group:"acemq.topologies"`
	Consumers  []Consumer           `group:"acemq.consumers"`
	Middleware []middlewareSet      `group:"acemq.middleware"`
}

// runner declares the app's topology and runs its consumers.
type runner struct {
	b         *mq.Broker
	log       *slog.Logger
	shutdown  fx.Shutdowner
	topo      *topology.Topology // nil: no fragments
	consumers []Consumer
	mws       []mq.Middleware

	running []*mq.Consumer
	quit    chan struct{} // closed at stop: the watchers end
	watch   sync.WaitGroup
}

// newRunner checks what the app fed the groups (all mistakes at once, while
// the app is built) and hooks the runner to the lifecycle after the
// broker's own hook, which it depends on.
func newRunner(p runParams) (*runner, error) {
	r := &runner{b: p.Broker, log: p.Broker.Logger(), shutdown: p.Shutdowner, quit: make(chan struct{})}
	var errs []error
	// fx hands a value group over in a random order. Sort, so declaration
	// and start go the same way on every run.
	frags := slices.DeleteFunc(slices.Clone(p.Topologies), func(t *topology.Topology) bool { return t == nil })
	slices.SortStableFunc(frags, func(a, b *topology.Topology) int { return strings.Compare(a.String(), b.String()) })
	consumers := slices.Clone(p.Consumers)
	slices.SortStableFunc(consumers, func(a, b Consumer) int { return strings.Compare(a.Queue, b.Queue) })
	if len(frags) > 0 {
		r.topo = topology.New().Merge(frags...)
		if err := r.topo.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("fxmodule: the merged topology is invalid: %w", err))
		}
	}
	for _, c := range consumers {
		if c.Queue == "" {
			errs = append(errs, errors.New("fxmodule: a consumer's Queue is empty"))
		}
		if c.Handler == nil {
			errs = append(errs, fmt.Errorf("fxmodule: consumer of %q: Handler is nil", c.Queue))
		}
	}
	r.consumers = consumers
	switch len(p.Middleware) {
	case 0:
	case 1:
		r.mws = p.Middleware[0].mws
	default:
		at := ""
		for i, s := range p.Middleware {
			if i > 0 {
				at += " and "
			}
			at += s.at
		}
		errs = append(errs, fmt.Errorf("fxmodule: WithMiddleware was given %d times (at %s): give all shared middleware in one call, outermost first, so their order is explicit", len(p.Middleware), at))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	p.Lifecycle.Append(fx.Hook{OnStart: r.start, OnStop: r.stop})
	return r, nil
}

// options are c's consumer options with the shared middleware outermost.
func (r *runner) options(c Consumer) []mq.ConsumerOption {
	opts := make([]mq.ConsumerOption, 0, len(c.Options)+1)
	if len(r.mws) > 0 {
		opts = append(opts, mq.WithMiddleware(r.mws...))
	}
	return append(opts, c.Options...)
}

func (r *runner) start(ctx context.Context) error {
	sctx, cancel := beforeDeadline(ctx)
	defer cancel()
	if r.topo != nil {
		if err := r.b.Declare(sctx, r.topo); err != nil {
			r.abort(ctx)
			return fmt.Errorf("fxmodule: start: declare the topology: %w", err)
		}
		r.log.Info("acemq.topology.declared", "exchanges", len(r.topo.Exchanges()), "queues", len(r.topo.Queues()), "bindings", len(r.topo.Bindings()))
	}
	for _, c := range r.consumers {
		mc, err := r.b.Consume(sctx, c.Queue, c.Handler, r.options(c)...)
		if err != nil {
			r.abort(ctx)
			return fmt.Errorf("fxmodule: start: consumer of %q: %w", c.Queue, err)
		}
		r.running = append(r.running, mc)
	}
	for _, mc := range r.running {
		r.watch.Add(1)
		go r.watchConsumer(mc)
	}
	return nil
}

// watchConsumer asks the app to shut down when mc ends on its own with an
// error (it gave up resubscribing), until stop.
func (r *runner) watchConsumer(mc *mq.Consumer) {
	defer r.watch.Done()
	select {
	case <-r.quit:
	case <-mc.Done():
		select {
		case <-r.quit:
			return // stopping anyway
		default:
		}
		if err := mc.Err(); err != nil {
			r.log.Error("acemq.consumer.ended", "queue", mc.Queue(), "error", err)
			if serr := r.shutdown.Shutdown(fx.ExitCode(1)); serr != nil {
				r.log.Error("acemq.shutdown.failed", "error", serr)
			}
		}
	}
}

// abort undoes a start that failed: it stops the consumers started so far
// and closes the broker. fx rolls back only while the start context lasts,
// so the module cleans up after itself.
func (r *runner) abort(ctx context.Context) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	_ = r.stopConsumers(cctx)
	r.running = nil
	if err := r.b.Close(cctx); err != nil {
		r.log.Warn("acemq.close.failed", "error", err)
	}
}

func (r *runner) stop(ctx context.Context) error {
	close(r.quit)
	r.watch.Wait()
	err := r.stopConsumers(ctx)
	if err != nil && ctx.Err() != nil {
		// fx runs no further stop hooks once the stop context has ended:
		// close the broker here, or its connection would outlive the app.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		if cerr := r.b.Close(cctx); cerr != nil {
			err = errors.Join(err, fmt.Errorf("fxmodule: stop: close the broker: %w", cerr))
		}
	}
	return err
}

// stopConsumers stops every running consumer at once, each draining within
// ctx.
func (r *runner) stopConsumers(ctx context.Context) error {
	errs := make([]error, len(r.running))
	var wg sync.WaitGroup
	for i, mc := range r.running {
		wg.Go(func() { errs[i] = mc.Stop(ctx) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("fxmodule: stop consumers: %w", err)
	}
	return nil
}
