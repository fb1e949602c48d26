package fxmodule

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/fx"

	"github.com/acemq/acemq-go/middleware"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/retry"
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
	Inbox      mq.Middleware        `name:"acemq.inbox" optional:"true"`
}

// runner declares the app's topology and runs its consumers.
type runner struct {
	b         *mq.Broker
	log       *slog.Logger
	shutdown  fx.Shutdowner
	topo      *topology.Topology // nil: no fragments
	consumers []Consumer
	mws       []mq.Middleware

	running []*mq.Consumer // running[i] consumes consumers[i].Queue (start stops at the first failure)
	quit    chan struct{}  // closed at stop: the watchers end
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
	r.topo = merged(p.Topologies)
	consumers := slices.Clone(p.Consumers)
	slices.SortStableFunc(consumers, func(a, b Consumer) int { return strings.Compare(a.Queue, b.Queue) })
	if r.topo != nil {
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
	sets := slices.Clone(p.Middleware)
	slices.SortStableFunc(sets, func(a, b middlewareSet) int { return cmp.Compare(a.order, b.order) })
	for i, set := range sets {
		if i > 0 && sets[i-1].order == set.order {
			errs = append(errs, fmt.Errorf("fxmodule: AsMiddleware was given twice with order %d (at %s and at %s): give each its own order, so which sits outside is explicit", set.order, sets[i-1].at, set.at))
		}
		if set.mw != nil {
			r.mws = append(r.mws, set.mw)
		}
	}
	for i, c := range consumers {
		if c.Queue == "" || c.Handler == nil {
			continue
		}
		opts, err := ConsumerOptions(c, r.topo, p.Inbox, r.mws...)
		if err != nil {
			errs = append(errs, err)
		}
		consumers[i].Options = opts // what start consumes with
	}
	r.consumers = consumers
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	p.Lifecycle.Append(fx.Hook{OnStart: r.start, OnStop: r.stop})
	return r, nil
}

// ConsumerOptions returns the options the module consumes c.Queue with,
// given the app's merged topology t (nil: none), the app's inbox (nil:
// none; outbox.Module provides it) and the middleware the app gives
// AsMiddleware, in order: shared outermost (mq.WithMiddleware), then
// middleware.Standard with the policy t declares for c.Queue when
// c.Standard is set, then c.Options, then, when c.Inbox is set, inbox
// innermost, next to the handler. It fails as fx.New fails for c: a
// consumer option that is invalid, Inbox set with no inbox, Standard with
// no topology.Retry for the queue, a ladder given both by Standard and by
// Options, or a ladder in Options whose policy is not the one t declares.
// The module calls it for every consumer; fxmoduletest.Consumer and
// fxmoduletest.ConsumerWithInbox run a handler through exactly these
// options, so a test and the app cannot drift apart.
func ConsumerOptions(c Consumer, t *topology.Topology, inbox mq.Middleware, shared ...mq.Middleware) ([]mq.ConsumerOption, error) {
	if c.Inbox && inbox == nil {
		return nil, fmt.Errorf("fxmodule: consumer of %q: Inbox is set, but the app has no inbox: give outbox.Module (it provides the inbox, fxmodule.AsInbox, with the schema its relay uses); a test runs such a consumer with fxmoduletest.ConsumerWithInbox", c.Queue)
	}
	if c.Inbox {
		c.Options = append(slices.Clone(c.Options), mq.WithMiddleware(inbox))
	}
	var declared *retry.Policy
	if t != nil {
		if q, ok := t.QueueNamed(c.Queue); ok && q.HasRetry {
			declared = &q.Retry
		}
	}
	r, err := mq.NewRunner(c.Handler, nil, c.Options...)
	if err != nil {
		return nil, fmt.Errorf("fxmodule: consumer of %q: %w", c.Queue, err)
	}
	var own *retry.Policy
	if p, ok := r.RetryPolicy(); ok {
		own = &p
	}
	opts := make([]mq.ConsumerOption, 0, len(c.Options)+2)
	if len(shared) > 0 {
		opts = append(opts, mq.WithMiddleware(slices.Clone(shared)...))
	}
	switch {
	case c.Standard && own != nil:
		return nil, fmt.Errorf("fxmodule: consumer of %q: Standard takes the retry policy from the topology (%s), but its Options run a retry ladder of their own (%s): give the policy once", c.Queue, describe(declared), own)
	case c.Standard && declared == nil:
		return nil, fmt.Errorf("fxmodule: consumer of %q: Standard takes the retry policy from the topology, but the app's topology declares no topology.Retry for queue %q", c.Queue, c.Queue)
	case c.Standard:
		opts = append(opts, middleware.Standard(*declared, c.StandardOptions...))
	case own != nil && declared != nil && !own.Equal(*declared):
		return nil, fmt.Errorf("fxmodule: consumer of %q runs retry policy %s, but the topology declares queue %q with Retry(%s): the rungs declared would not be the rungs used; write the policy once, in the topology, and set Consumer.Standard", c.Queue, own, c.Queue, declared)
	}
	return append(opts, c.Options...), nil
}

func describe(p *retry.Policy) string {
	if p == nil {
		return "none declared"
	}
	return p.String()
}

// checkQueues fails when a consumer's queue is neither declared by the
// merged topology nor present on the broker, naming every such queue,
// before anything is declared.
func (r *runner) checkQueues(ctx context.Context) error {
	var missing []string
	for _, c := range r.consumers {
		if r.topo != nil {
			if _, ok := r.topo.QueueNamed(c.Queue); ok {
				continue
			}
		}
		ok, err := r.b.QueueExists(ctx, c.Queue)
		if err != nil {
			return fmt.Errorf("fxmodule: start: consumer of %q: %w", c.Queue, err)
		}
		if !ok && !slices.Contains(missing, c.Queue) {
			missing = append(missing, c.Queue)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return fmt.Errorf("fxmodule: start: %w: no topology fragment declares queue %s and the broker does not have it: the consumer of it cannot start (misspelled? add the queue with fxmodule.AsTopology)", mq.ErrNotFound, quoteAll(missing))
}

func quoteAll(qs []string) string {
	s := ""
	for i, q := range qs {
		if i > 0 {
			s += ", "
		}
		s += strconv.Quote(q)
	}
	return s
}

func (r *runner) start(ctx context.Context) error {
	sctx, cancel := beforeDeadline(ctx)
	defer cancel()
	if err := r.checkQueues(sctx); err != nil {
		r.abort(ctx)
		return err
	}
	if r.topo != nil {
		if err := r.b.Declare(sctx, r.topo); err != nil {
			r.abort(ctx)
			return fmt.Errorf("fxmodule: start: declare the topology: %w", err)
		}
		r.log.Info("acemq.topology.declared", "exchanges", len(r.topo.Exchanges()), "queues", len(r.topo.Queues()), "bindings", len(r.topo.Bindings()))
	}
	for _, c := range r.consumers {
		mc, err := r.b.Consume(sctx, c.Queue, c.Handler, c.Options...)
		if err != nil {
			r.abort(ctx)
			return fmt.Errorf("fxmodule: start: consumer of %q: %w", c.Queue, err)
		}
		r.running = append(r.running, mc)
	}
	for i, mc := range r.running {
		r.watch.Add(1)
		go r.watchConsumer(r.consumers[i].Queue, mc)
	}
	return nil
}

// watchConsumer asks the app to shut down when mc, the consumer of queue,
// ends on its own with an error (it gave up resubscribing), until stop.
func (r *runner) watchConsumer(queue string, mc *mq.Consumer) {
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
			r.log.Error("acemq.consumer.ended", "queue", queue, "error", err)
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
