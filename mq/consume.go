package mq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Consumer consumes one queue with one handler and its middleware. It
// survives connection loss: after a reconnect it runs its middleware's
// Subscribe hooks again and resubscribes. Stop drains it.
type Consumer struct {
	b      *Broker
	queue  string
	cfg    consumerConfig
	log    *slog.Logger
	runner *Runner // its chain, and what carries out the chain's decisions
	memo   attemptMemo

	life    context.Context // ends at Stop or Broker.Close: bounds resubscribing
	endLife context.CancelFunc

	mu      sync.Mutex
	hop     *Publisher
	stopCtx context.Context

	stopping  chan struct{}
	stopOnce  sync.Once
	abort     chan struct{}
	abortOnce sync.Once
	done      chan struct{}
	err       error

	subscribed atomic.Bool // consuming now: Broker.Check reads it

	slots      chan struct{}  // the handler slots, shared by the sessions (see session.slots)
	stragglers sync.WaitGroup // workers of ended sessions still in a handler (outlive)
}

// Consume subscribes h, wrapped in the consumer's middleware, to queue, and
// returns once the first subscribe succeeded: a missing queue or refused
// access fails here, with the reason named (a missing queue this Broker
// declared is declared again first, as on every resubscribe: see
// Broker.Declare). The consumer then runs until Stop (or Broker.Close).
//
// A stream queue is refused with [ErrInvalid]: the runtime requeues,
// rejects and dead-letters, none of which a stream does. One this Broker
// declared is refused here. One declared elsewhere (another service,
// rabbitmqctl, a channel of your own) cannot be told from a queue before
// it delivers, so Consume subscribes, and the consumer refuses it at its
// first delivery, which carries x-stream-offset: before any hook,
// middleware or handler sees it, the consumer closes its channel (the
// stream keeps the message) and ends, Done closed and Err saying why. A
// copy of a stream's message in a queue, which carries the header too, is
// handled: the broker is asked first (docs/brokers.md).
func (b *Broker) Consume(ctx context.Context, queue string, h Handler, opts ...ConsumerOption) (*Consumer, error) {
	cfg := consumerConfigOf(b.cfg.ConnectionName, queue, h, opts)
	if b.reg.queueType(queue) == "stream" {
		cfg.errs = append(cfg.errs, errStreamConsume)
	}
	runner := newRunner(h, b.hooks.attempt, cfg.mws)
	declared, ok := b.reg.declaredRetry(queue)
	if err := takePolicies(runner.built, queue, declared, ok); err != nil {
		cfg.errs = append(cfg.errs, err)
	} else if err := b.errPolicyTwice(queue, runner); err != nil {
		cfg.errs = append(cfg.errs, err)
	}
	if err := errors.Join(cfg.errs...); err != nil {
		return nil, fmt.Errorf("mq: consume %q: %w", queue, err)
	}
	c := &Consumer{b: b, queue: queue, cfg: cfg, log: b.log.With("queue", queue),
		stopping: make(chan struct{}), abort: make(chan struct{}), done: make(chan struct{}),
		slots: make(chan struct{}, cfg.concurrency)}
	c.runner = runner
	c.life, c.endLife = context.WithCancel(b.life)
	if err := b.register(nil, c); err != nil {
		c.endLife()
		return nil, err
	}
	sub, err := c.subscribe(ctx, false)
	if err != nil {
		c.endLife()
		c.closeHops()
		b.unregister(nil, c)
		// A Broker.Close that saw c registered may be waiting in Stop.
		c.err = err
		close(c.done)
		return nil, err
	}
	c.subscribed.Store(true)
	b.reg.noteConsumed(queue) // a reconnect declares it again only while consumed (recovery.go)
	go c.run(sub)
	return c, nil
}

// errStreamConsume refuses a stream: at Consume, a queue the Broker
// declared as one; at its first delivery, one declared elsewhere
// (session.refuses). The consumer runtime requeues, dead-letters and
// retries, none of which a stream does, and it subscribes with no offset,
// so it would start at the stream's end.
var errStreamConsume = fmt.Errorf("%w: a stream queue (x-queue-type='stream') cannot be consumed by the consumer runtime, which requeues and dead-letters; read it with an x-stream-offset on a channel of your own (Broker.Channel)", ErrInvalid)

// Done is closed when the consumer has ended: stopped, given up (see
// WithGiveUpAfter), or found its queue is a stream (see Consume). Err then
// says why.
func (c *Consumer) Done() <-chan struct{} { return c.done }

// Err is why the consumer ended: nil after Stop, the last subscribe error
// after giving up, an [ErrInvalid] saying the queue is a stream after its
// first delivery showed it is one, joined with any error of the
// middleware's Stop hooks.
// Valid once Done is closed.
func (c *Consumer) Err() error {
	select {
	case <-c.done:
		return c.err
	default:
		return nil
	}
}

// Stop drains the consumer: it cancels consumption, lets in-flight
// handlers finish within ctx and settles them, closes the channels, then
// runs the middleware's Stop hooks. Messages received but not yet handled
// go back to the queue with one multiple basic.nack per channel, whose
// arrival a round trip confirms before the channel closes: nobody's
// failure, which RabbitMQ 4.3 does not count toward a quorum queue's
// delivery limit (a return by the close it would). If ctx ends first,
// in-flight handlers' contexts are cancelled, the channel is closed (the
// broker requeues what was not settled) and Stop returns ctx's error; Done
// closes when the last handler has returned. Stop is idempotent. A
// consumer that already ended with an error (see Err) keeps the Broker's
// Check failing until it is stopped.
func (c *Consumer) Stop(ctx context.Context) error {
	c.stopOnce.Do(func() {
		c.mu.Lock()
		c.stopCtx = ctx
		c.mu.Unlock()
		close(c.stopping)
		c.endLife()
	})
	select {
	case <-c.done:
		c.b.unregister(nil, c) // one that ended with an error was kept for Check
		return nil
	case <-ctx.Done():
		c.abortOnce.Do(func() { close(c.abort) })
		return fmt.Errorf("mq: stop consumer of %q: handlers still running: %w", c.queue, ctx.Err())
	}
}

func (c *Consumer) isStopping() bool {
	select {
	case <-c.stopping:
		return true
	default:
		return false
	}
}

// subscribe subscribes (subscribeOnce), and once more if the queue was
// missing and the Broker declared it again (recovery.go).
func (c *Consumer) subscribe(ctx context.Context, resub bool) (*session, error) {
	sub, err := c.subscribeOnce(ctx, resub)
	if err != nil && c.b.redeclareMissing(ctx, c.queue, err) {
		sub, err = c.subscribeOnce(ctx, resub)
	}
	return sub, err
}

// subscribeOnce runs the middleware's Subscribe hooks, then opens a
// session: a channel with the consumer's prefetch, consuming its queue.
func (c *Consumer) subscribeOnce(ctx context.Context, resub bool) (*session, error) {
	info := &Subscription{Queue: c.queue, Broker: c.b, Logger: c.log, Resubscribe: resub, Runner: c.runner}
	for _, h := range c.runner.built {
		if s, ok := h.(Subscriber); ok {
			if err := s.Subscribe(ctx, info); err != nil {
				return nil, fmt.Errorf("mq: consumer of %q: before subscribing: %w", c.queue, err)
			}
		}
	}
	return openSession(ctx, c)
}

// run owns the consumer's goroutines: it serves one session after
// another until Stop.
func (c *Consumer) run(sub *session) {
	var endErr error
	defer func() { c.finish(endErr) }()
	flaps := flapGuard{upAt: time.Now()}
	for {
		why := sub.serve()
		c.subscribed.Store(false)
		sub.close()
		sub.cancel()
		if c.isStopping() {
			return
		}
		if err := sub.refusal(); err != nil {
			// The queue is a stream (session.refuses): no subscribe of it
			// will do better. Err says so; the record marks the end.
			endErr = err
			c.log.Error("acemq.consumer.gave.up", "error", err)
			return
		}
		c.log.Warn("acemq.consumer.interrupted", "reason", why)
		if wait := c.interrupted(&flaps, why); wait > 0 {
			select {
			case <-time.After(wait):
			case <-c.stopping:
				return
			}
		}
		var failingSince time.Time
		for attempt := flaps.flaps; ; attempt++ {
			ns, err := c.subscribe(c.life, true)
			if err == nil {
				sub = ns
				c.subscribed.Store(true)
				flaps.up(time.Now())
				c.log.Info("acemq.consumer.resubscribed")
				break
			}
			if c.isStopping() {
				return // Stop ended c.life under the subscribe: not a failure to report
			}
			if failingSince.IsZero() {
				failingSince = time.Now()
			}
			if c.cfg.giveUp > 0 && time.Since(failingSince) >= c.cfg.giveUp {
				// The error is returned through Err (each failure was
				// logged as it came); the record only marks the end.
				endErr = fmt.Errorf("mq: consumer of %q gave up after %v: %w", c.queue, c.cfg.giveUp, err)
				c.log.Error("acemq.consumer.gave.up", "after", c.cfg.giveUp)
				return
			}
			if errors.Is(err, ErrClosed) {
				return
			}
			wait := c.b.backoff(attempt)
			c.log.Warn(EventConsumerSubscribeFailed, "error", err, "retry_in", wait)
			select {
			case <-time.After(wait):
			case <-c.stopping:
				return
			}
		}
	}
}

// interrupted is called by a consumer whose session ended (why) and
// returns how long to wait before resubscribing: the backoff of the
// session's flaps so far. A streak of flaps caused by undecodable
// frames is reported once as EventConsumerPoison.
func (c *Consumer) interrupted(g *flapGuard, why string) time.Duration {
	flaps := g.down(time.Now())
	if flaps == 0 {
		return 0
	}
	wait := c.b.backoff(flaps - 1)
	if frameError(why) && g.alarm() {
		c.log.Error(EventConsumerPoison, "flaps", flaps, "error", why, "retry_in", wait)
		c.b.hooks.emit(context.Background(), Event{Name: EventConsumerPoison, Queue: c.queue, Err: errorString(why)})
	}
	return wait
}

// hops is the consumer's own publisher for the library's hops: default
// exchange, mandatory, opened on first use.
func (c *Consumer) hops() *Publisher {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.hop == nil {
		c.hop = c.b.Publisher("", Mandatory())
	}
	return c.hop
}

func (c *Consumer) closeHops() {
	c.mu.Lock()
	p := c.hop
	c.mu.Unlock()
	if p != nil {
		p.Close()
	}
}

// outlive makes the workers of an ended session, still in a handler
// (workersDone not closed), the consumer's: it ends (Done) only after them.
func (c *Consumer) outlive(workersDone <-chan struct{}) {
	c.stragglers.Add(1)
	go func() {
		defer c.stragglers.Done()
		<-workersDone
	}()
}

func (c *Consumer) finish(err error) {
	c.stragglers.Wait() // Done closes when the last handler has returned
	c.mu.Lock()
	ctx := c.stopCtx
	c.mu.Unlock()
	if ctx == nil {
		ctx = context.Background()
	}
	var errs []error
	if err != nil {
		errs = append(errs, err)
	}
	for i := len(c.runner.built) - 1; i >= 0; i-- {
		if s, ok := c.runner.built[i].(stopper); ok {
			if serr := s.Stop(ctx); serr != nil {
				errs = append(errs, fmt.Errorf("mq: consumer of %q: at stop: %w", c.queue, serr))
			}
		}
	}
	c.closeHops()
	c.endLife()
	c.err = errors.Join(errs...)
	// A consumer that ended with an error, not stopped, stays registered:
	// Broker.Check reports it until Stop.
	failed := c.err != nil && !c.isStopping()
	if !failed {
		c.b.unregister(nil, c)
	}
	close(c.done)
}

// ended reports whether c has ended (Done is closed).
func (c *Consumer) ended() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}
