package mq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Consumer defaults.
const (
	DefaultPrefetch     = 32
	DefaultConcurrency  = 1
	DefaultRequeuePause = time.Second
	// DefaultMaxWaiting is the room for deliveries waiting in-process on
	// top of the prefetch window (WithMaxWaiting).
	DefaultMaxWaiting = 256
)

// ConsumerOption configures a consumer.
type ConsumerOption interface{ applyConsumer(*consumerConfig) }

type consumerOption func(*consumerConfig)

func (f consumerOption) applyConsumer(c *consumerConfig) { f(c) }

type consumerConfig struct {
	prefetch     int
	concurrency  int
	tag          string
	mws          []Middleware
	requeuePause time.Duration
	giveUp       time.Duration
	maxWaiting   int
	inOrder      bool
	ackEach      bool
	errs         []error
}

// WithPrefetch sets how many unacknowledged deliveries the broker sends
// ahead (basic.qos). Default DefaultPrefetch (32), raised to the
// concurrency if that is higher; it must be at least the concurrency.
func WithPrefetch(n int) ConsumerOption {
	return consumerOption(func(c *consumerConfig) {
		if n < 1 {
			c.errs = append(c.errs, fmt.Errorf("WithPrefetch(%d): must be at least 1", n))
			return
		}
		c.prefetch = n
	})
}

// WithConcurrency sets how many deliveries are handled at once. Default 1,
// which keeps the queue's order.
func WithConcurrency(n int) ConsumerOption {
	return consumerOption(func(c *consumerConfig) {
		if n < 1 {
			c.errs = append(c.errs, fmt.Errorf("WithConcurrency(%d): must be at least 1", n))
			return
		}
		c.concurrency = n
	})
}

// WithConsumerTag sets the consumer tag. Default: connection name, queue
// and a sequence number.
func WithConsumerTag(tag string) ConsumerOption {
	return consumerOption(func(c *consumerConfig) { c.tag = tag })
}

// WithMiddleware adds middleware around the handler, the first outermost.
// Given more than once, later middleware sits inside earlier middleware.
// The order is exactly the order written: nothing reorders it.
func WithMiddleware(mws ...Middleware) ConsumerOption {
	return consumerOption(func(c *consumerConfig) { c.mws = append(c.mws, mws...) })
}

// WithRequeuePause sets how long a message the chain returns with Requeue
// (a hop that failed, a panic that escaped every middleware) is held before
// it is returned to its queue, so a missing queue does not turn into a hot
// loop. Default DefaultRequeuePause (1 s). Cut short when the consumer
// stops or its channel is lost.
func WithRequeuePause(d time.Duration) ConsumerOption {
	return consumerOption(func(c *consumerConfig) { c.requeuePause = max(d, 0) })
}

// WithMaxWaiting sets how many deliveries may wait in-process at once for
// their next attempt (Delivery.Wait) without slowing the rest of the
// queue. Default DefaultMaxWaiting (256). A waiting delivery frees its
// worker, and up to n of them take no room from the prefetch window: the
// queue flows around them at full speed. Past n, each further waiting
// delivery takes its room from the window, so the broker sends less until
// a wait ends, and when every delivery in the window waits, the consumer
// idles until the first wait is over. 0 gives waits no room of their own.
// To keep waiting deliveries out of the window the consumer uses a few
// more channels of the same connection (at most 1 + n/16); DESIGN.md
// ("Waiting in-process") says how.
func WithMaxWaiting(n int) ConsumerOption {
	return consumerOption(func(c *consumerConfig) {
		if n < 0 {
			c.errs = append(c.errs, fmt.Errorf("WithMaxWaiting(%d): must be at least 0", n))
			return
		}
		c.maxWaiting = n
	})
}

// InOrder keeps the queue's order through retries: an in-process wait holds
// its worker, so no later message overtakes a failing one (with the default
// concurrency of 1, the queue waits with it). Without InOrder, a delivery
// waiting in-process frees its worker for the rest of the queue. Broker
// rungs reorder a queue whatever the option: keep every wait in-process
// for strict order.
func InOrder() ConsumerOption {
	return consumerOption(func(c *consumerConfig) { c.inOrder = true })
}

// WithGiveUpAfter ends the consumer with an error (see Done and Err) once
// it has failed to resubscribe for d without a break — a queue deleted for
// good, say. Default: never; the consumer retries with backoff and says why
// in the log.
func WithGiveUpAfter(d time.Duration) ConsumerOption {
	return consumerOption(func(c *consumerConfig) { c.giveUp = max(d, 0) })
}

// Consumer consumes one queue with one handler and its middleware. It
// survives connection loss: after a reconnect it runs its middleware's
// Subscribe hooks again and resubscribes. Stop drains it.
type Consumer struct {
	b       *Broker
	queue   string
	cfg     consumerConfig
	log     *slog.Logger
	handler Handler
	built   []Handler
	memo    attemptMemo

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
}

var consumerSeq atomic.Uint64

// Consume subscribes h, wrapped in the consumer's middleware, to queue, and
// returns once the first subscribe succeeded: a missing queue or refused
// access fails here, with the reason named. The consumer then runs until
// Stop (or Broker.Close).
func (b *Broker) Consume(ctx context.Context, queue string, h Handler, opts ...ConsumerOption) (*Consumer, error) {
	cfg := consumerConfig{requeuePause: DefaultRequeuePause, maxWaiting: -1}
	for _, o := range opts {
		if o != nil {
			o.applyConsumer(&cfg)
		}
	}
	if queue == "" {
		cfg.errs = append(cfg.errs, errors.New("the queue name is empty"))
	}
	cfg.errs = append(cfg.errs, CheckName("queue name", queue), CheckName("consumer tag", cfg.tag))
	if h == nil {
		cfg.errs = append(cfg.errs, errors.New("the handler is nil"))
	}
	if cfg.concurrency == 0 {
		cfg.concurrency = DefaultConcurrency
	}
	if cfg.prefetch == 0 {
		cfg.prefetch = max(DefaultPrefetch, cfg.concurrency)
	}
	if cfg.prefetch < cfg.concurrency {
		cfg.errs = append(cfg.errs, fmt.Errorf("prefetch %d is below the concurrency %d: handlers would sit idle", cfg.prefetch, cfg.concurrency))
	}
	if cfg.tag == "" {
		cfg.tag = fmt.Sprintf("%s.%s.%d", b.cfg.ConnectionName, queue, consumerSeq.Add(1))
		if len(cfg.tag) > 255 {
			cfg.tag = cfg.tag[len(cfg.tag)-255:]
		}
	}
	if cfg.maxWaiting < 0 {
		cfg.maxWaiting = DefaultMaxWaiting
	}
	if cfg.inOrder {
		cfg.maxWaiting = 0 // nothing waits without its worker
	}
	if err := errors.Join(cfg.errs...); err != nil {
		return nil, fmt.Errorf("mq: consume %q: %w", queue, err)
	}
	c := &Consumer{b: b, queue: queue, cfg: cfg, log: b.log.With("queue", queue),
		stopping: make(chan struct{}), abort: make(chan struct{}), done: make(chan struct{})}
	c.handler, c.built = chain(&attemptHandler{next: h, hooks: b.hooks.attempt}, cfg.mws)
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
	go c.run(sub)
	return c, nil
}

// Queue is the queue consumed.
func (c *Consumer) Queue() string { return c.queue }

// Done is closed when the consumer has ended: stopped, or given up (see
// WithGiveUpAfter). Err then says why.
func (c *Consumer) Done() <-chan struct{} { return c.done }

// Err is why the consumer ended: nil after Stop, the last subscribe error
// after giving up, joined with any error of the middleware's Stop hooks.
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
// go back to the queue with basic.nack before the channels close: nobody's
// failure, which RabbitMQ 4.3 does not count toward a quorum queue's
// delivery limit (a return by the close it would). If ctx ends first,
// in-flight handlers' contexts are cancelled, the channel is closed (the
// broker requeues what was not settled) and Stop returns ctx's error; Done
// closes when the last handler has returned. Stop is idempotent.
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

// subscription is one connection's worth of consuming: the lanes
// (channels) it consumes on, one after the other (see lanes.go), and the
// workers that handle what comes on them.
type subscription struct {
	st        *conn
	lost      chan *amqp.Error // a lane's channel closed
	cancels   chan string      // the broker cancelled a lane's consumer
	ctx       context.Context  // the handlers' context
	cancel    context.CancelFunc
	draining  chan struct{}
	drainOnce sync.Once
	closeOnce sync.Once

	// slots holds one token per delivery being handled: at most the
	// consumer's concurrency. A delivery waiting in-process gives its token
	// back (Delivery.Wait) and a worker goroutine is added in its place, so
	// the queue goes on; workers counts those goroutines.
	slots   chan struct{}
	workers atomic.Int32
	wg      sync.WaitGroup

	head      atomic.Pointer[stream] // the stream the workers read
	active    atomic.Pointer[lane]   // the lane whose consumer is live
	move      chan struct{}          // a wait asks the mover to move on
	free      atomic.Bool            // a lane to move to is at hand (refreshFreeLocked)
	moverDone chan struct{}

	mu      sync.Mutex
	lanes   []*lane   // every channel it holds
	streams []*stream // not ended, oldest first; the last is active's
}

func (s *subscription) drain() { s.drainOnce.Do(func() { close(s.draining) }) }

// close gives the channels up, after sending the acknowledgements still
// due on them (on a channel already dead that send fails, and the broker
// has requeued those deliveries anyway).
func (s *subscription) close() {
	s.closeOnce.Do(func() {
		for _, l := range s.allLanes() {
			_ = l.acks.Close()
			_ = l.ch.Close()
		}
	})
}

// dropAcks forgets the acknowledgements not sent: a channel died.
func (s *subscription) dropAcks() {
	for _, l := range s.allLanes() {
		l.acks.Drop()
	}
}

func (s *subscription) allLanes() []*lane {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*lane(nil), s.lanes...)
}

// qos is what each of the consumer's channels asks of basic.qos: the
// window for the deliveries being handled plus room for the few that may
// wait in-process on it before the subscription moves (lanes.go), which
// the broker counts as unacknowledged too.
func (cfg *consumerConfig) qos() int {
	return min(cfg.prefetch+min(cfg.maxWaiting, laneWaiters), math.MaxUint16)
}

func (c *Consumer) subscribe(ctx context.Context, resub bool) (*subscription, error) {
	info := &Subscription{Queue: c.queue, Broker: c.b, Logger: c.log, Resubscribe: resub, handlers: c.built}
	for _, h := range c.built {
		if s, ok := h.(Subscriber); ok {
			if err := s.Subscribe(ctx, info); err != nil {
				return nil, fmt.Errorf("mq: consumer of %q: before subscribing: %w", c.queue, err)
			}
		}
	}
	l, cn, err := c.newLane(ctx)
	if err != nil {
		return nil, err
	}
	st, err := c.consume(ctx, l)
	if err != nil {
		c.b.closeLater(l.ch)
		return nil, err
	}
	s := &subscription{st: cn, draining: make(chan struct{}), slots: make(chan struct{}, c.cfg.concurrency),
		lost: make(chan *amqp.Error, 1), cancels: make(chan string, 1),
		move: make(chan struct{}, 1), moverDone: make(chan struct{}),
		lanes: []*lane{l}, streams: []*stream{st}}
	l.cur = st
	s.head.Store(st)
	s.active.Store(l)
	s.join(l, c.cfg)
	s.ctx, s.cancel = context.WithCancel(context.Background())
	return s, nil
}

// run owns the consumer's goroutines: it serves one subscription after
// another until Stop.
func (c *Consumer) run(sub *subscription) {
	var endErr error
	defer func() { c.finish(endErr) }()
	flaps := flapGuard{upAt: time.Now()}
	for {
		why := c.serve(sub)
		c.subscribed.Store(false)
		sub.close()
		sub.cancel()
		if c.isStopping() {
			return
		}
		c.log.Warn("acemq.consumer.interrupted", "reason", why)
		if wait := c.interrupted(&flaps, why); wait > 0 { // see flap.go
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

// serve runs the workers on sub until it ends or the consumer stops, and
// returns why it ended. Every worker has returned when serve does.
func (c *Consumer) serve(sub *subscription) string {
	for range c.cfg.concurrency {
		sub.spawn(c)
	}
	if c.cfg.maxLanes() > 1 {
		go c.mover(sub)
	} else {
		close(sub.moverDone)
	}
	defer func() {
		sub.drain() // the mover's cue, whatever ended the subscription
		<-sub.moverDone
	}()
	workersDone := make(chan struct{})
	go func() {
		sub.wg.Wait()
		close(workersDone)
	}()
	select {
	case <-c.stopping:
		sub.drain()
		// No new deliveries; in-flight ones still settle on their
		// channels. The mover, having seen the drain, moves no more.
		<-sub.moverDone
		c.cancelStreams(sub)
		select {
		case <-workersDone:
			sub.releaseUnread(c.abort)
		case <-c.abort:
			sub.close()  // first: the broker requeues what was not settled,
			sub.cancel() // and a handler cut short can no longer reject it
			<-workersDone
		}
		return "stopped"
	case e := <-sub.lost:
		// A channel (or the connection) is gone, and with it its
		// unsettled deliveries: the broker has requeued them. Stop the
		// work; the other channels are closed with the subscription.
		sub.dropAcks()
		sub.drain()
		sub.cancel()
		<-workersDone
		if e == nil {
			return "channel closed"
		}
		return e.Error()
	case <-sub.cancels:
		// The broker cancelled the consumer (its queue was deleted): the
		// channel lives, so in-flight deliveries still settle on it.
		sub.drain()
		<-workersDone
		return "consumer cancelled by the broker (queue deleted?)"
	case <-workersDone:
		sub.drain()
		return "delivery stream ended"
	}
}

// release gives back a delivery of st that was never started, with
// basic.nack: it is nobody's failure, and RabbitMQ 4.3 does not count such
// a return toward a quorum queue's delivery limit, as it would a channel
// closed holding it. On a dead channel the broker has returned it already.
func (s *subscription) release(st *stream, raw amqp.Delivery) {
	_ = st.lane.acks.Give(raw.DeliveryTag, giveRelease)
	st.lane.held.Add(-1)
}

// cancelStreams cancels, at Stop, every consumer of sub the broker has not
// confirmed cancelled: the one consumed on, and one a move left behind
// when the drain cut its cancel short. Each cancel is bounded by the
// Stop's context; a stream whose cancel fails stays unconfirmed.
func (c *Consumer) cancelStreams(sub *subscription) {
	c.mu.Lock()
	ctx := c.stopCtx
	c.mu.Unlock()
	sub.mu.Lock()
	streams := slices.Clone(sub.streams)
	sub.mu.Unlock()
	for _, st := range streams {
		sub.mu.Lock()
		done := st.cancelled || st.ended
		sub.mu.Unlock()
		if done {
			continue
		}
		if c.b.bounded(ctx, func() error { return st.lane.ch.Cancel(c.cfg.tag, false) }, nil) == nil {
			sub.mu.Lock()
			st.cancelled = true
			sub.mu.Unlock()
		}
	}
}

// releaseUnread gives back what the broker sent and no worker took, once
// the consumer is cancelled and its workers are done: each stream whose
// cancel the broker confirmed is read to its end (amqp091 ends it after
// the cancel-ok, once what came before is read; a stream still consuming
// would only be sent each message again). A stream not confirmed, one
// whose end does not come within releaseWait, or an abort, leaves the rest
// to the channel's close, which returns it too.
func (s *subscription) releaseUnread(abort <-chan struct{}) {
	s.mu.Lock()
	var streams []*stream
	for _, st := range s.streams {
		if st.cancelled && !st.ended {
			streams = append(streams, st)
		}
	}
	s.mu.Unlock()
	t := time.NewTimer(releaseWait)
	defer t.Stop()
	for _, st := range streams {
	read:
		for {
			select {
			case raw, ok := <-st.deliveries:
				if !ok {
					break read
				}
				_ = st.lane.acks.Give(raw.DeliveryTag, giveRelease)
			case <-t.C:
				return
			case <-abort:
				return
			}
		}
	}
}

// releaseWait bounds releaseUnread.
const releaseWait = 2 * time.Second

// spawn adds a worker goroutine; the subscription's wait group owns it.
func (s *subscription) spawn(c *Consumer) {
	s.workers.Add(1)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		c.work(s)
	}()
}

// work takes deliveries one at a time and handles each holding a slot. A
// worker beyond the concurrency (added while a delivery waited) retires
// after its delivery.
func (c *Consumer) work(sub *subscription) {
	for {
		st := sub.reading()
		select {
		case <-sub.draining:
			sub.workers.Add(-1)
			return
		case raw, ok := <-st.deliveries:
			if !ok {
				if sub.streamEnded(st) {
					continue // left by a move: read the next
				}
				sub.workers.Add(-1)
				return
			}
			st.lane.held.Add(1)
			select {
			case sub.slots <- struct{}{}:
			case <-sub.draining:
				sub.release(st, raw) // not started
				sub.workers.Add(-1)
				return
			}
			select {
			case <-sub.draining: // both were ready: draining wins
				<-sub.slots
				sub.release(st, raw)
				sub.workers.Add(-1)
				return
			default:
			}
			c.handle(sub, st.lane, raw)
		}
		if n := sub.workers.Load(); n > int32(c.cfg.concurrency) && sub.workers.CompareAndSwap(n, n-1) {
			return
		}
	}
}

func (c *Consumer) handle(sub *subscription, l *lane, raw amqp.Delivery) {
	raw.Acknowledger = nil // settlement belongs to the runtime
	restoreOrigin(&raw)
	d := &Delivery{envelope: envelope(raw), queue: c.queue, attempt: c.memo.attempt(raw), sub: sub, lane: l, c: c, slot: true}
	ctx := sub.ctx
	hooks := c.b.hooks.delivery
	for _, h := range hooks {
		ctx = h.OnDelivery(ctx, d)
	}
	err := c.invoke(ctx, d)
	c.settle(sub, d, err)
	sub.settled(l)
	if d.slot {
		<-sub.slots
	}
	for i := len(hooks) - 1; i >= 0; i-- {
		hooks[i].OnDeliveryDone(ctx, d, err)
	}
}

// restoreOrigin gives a delivery that has hopped the exchange and routing
// key it was first delivered with, from the headers its first hop wrote.
func restoreOrigin(raw *amqp.Delivery) {
	if len(raw.Headers) == 0 {
		return
	}
	if v, ok := raw.Headers[HeaderOriginalExchange].(string); ok {
		raw.Exchange = v
	}
	if v, ok := raw.Headers[HeaderOriginalRoutingKey].(string); ok {
		raw.RoutingKey = v
	}
}

// wait is Delivery.Wait on a consumer: d waits w without its slot (unless
// the consumer keeps order) while a new worker takes the slot's place; then
// it takes a slot again for its next attempt.
func (c *Consumer) wait(ctx context.Context, d *Delivery, w time.Duration) error {
	sub := d.sub
	free := d.slot && !c.cfg.inOrder
	if free {
		// While it waits, this goroutine is no worker: one takes its place.
		d.slot = false
		<-sub.slots
		if sub.workers.Add(-1) < int32(c.cfg.concurrency) {
			sub.spawn(c)
		}
	}
	if free && c.cfg.maxLanes() > 1 {
		sub.waitStarts(d.lane)
		defer sub.waitEnds(d.lane)
	}
	err := waitFor(ctx, sub.draining, w)
	if free {
		sub.workers.Add(1) // back in its worker loop after this delivery; retires if one too many
		if err == nil {
			select {
			case sub.slots <- struct{}{}:
				d.slot = true
			case <-sub.draining:
				err = ErrWaitCut
			case <-ctx.Done():
				err = ErrWaitCut
			}
		}
	}
	return err
}

// waitFor waits w, or until ctx ends or cut closes: then ErrWaitCut.
func waitFor(ctx context.Context, cut <-chan struct{}, w time.Duration) error {
	if w <= 0 {
		if ctx.Err() != nil {
			return ErrWaitCut
		}
		return nil
	}
	t := time.NewTimer(w)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
	case <-cut:
	}
	return ErrWaitCut
}

func (c *Consumer) invoke(ctx context.Context, d *Delivery) (err error) {
	defer func() {
		if r := recover(); r != nil {
			pe := NewPanicError(r)
			c.log.Error("acemq.handler.panic", "message_id", d.MessageId, "panic", fmt.Sprint(r), "stack", string(pe.Stack))
			// A panic that escaped every middleware is never a reject (on a
			// queue with no dead-letter route that would drop the message):
			// the message goes back to its queue after the pause.
			err = Requeue(pe)
		}
	}()
	return c.handler.Handle(ctx, d)
}

// settle acknowledges or returns d on the channel it came on. A channel
// that has died since is never replaced by another: the broker has already
// requeued the delivery.
func (c *Consumer) settle(sub *subscription, d *Delivery, err error) {
	var serr error
	switch {
	case err != nil && sub.ctx.Err() != nil:
		// We cut the handler short (lost channel, stop deadline): its
		// failure is ours, not the message's. Back to the queue, and the
		// attempt it used remembered for its redelivery. By now the
		// channel is gone or closing, so it is its close that returns the
		// message (which RabbitMQ 4.3 counts); the release says what we
		// would have sent.
		d.outcome, d.cause = OutcomeRequeue, err
		c.memo.remember(d)
		c.requeued(d, "cut short", err)
		serr = d.lane.acks.Give(d.DeliveryTag, giveRelease)
	case err == nil:
		if d.outcome == "" {
			d.outcome = OutcomeAck
		}
		c.memo.forget(d)
		serr = d.lane.acks.Ack(d.DeliveryTag)
	case errors.Is(err, ErrRequeue):
		d.outcome, d.cause = OutcomeRequeue, err
		c.memo.remember(d)
		why := "requeued"
		if pe := (*PanicError)(nil); errors.As(err, &pe) {
			why = "panic"
		}
		c.requeued(d, why, err)
		if c.cfg.requeuePause > 0 {
			t := time.NewTimer(c.cfg.requeuePause)
			select {
			case <-t.C:
			case <-sub.draining:
			}
			t.Stop()
		}
		serr = d.lane.acks.Give(d.DeliveryTag, giveRequeue) // counted: the message failed
	default:
		d.outcome, d.cause = OutcomeReject, err
		c.memo.forget(d)
		c.log.Warn("acemq.message.rejected", "message_id", d.MessageId, "attempt", d.attempt, "error", err)
		serr = d.lane.acks.Give(d.DeliveryTag, giveReject)
	}
	if serr != nil {
		c.log.Debug("acemq.settle.skipped", "message_id", d.MessageId, "outcome", string(d.outcome), "error", serr)
	}
}

// requeued reports a return of d to its queue: each one counts against a
// quorum queue's delivery limit (RabbitMQ 4.x: 20 by default), past which
// the broker dead-letters the message or, with no dead-letter route, drops
// it. The event and its metric make such loops visible.
func (c *Consumer) requeued(d *Delivery, why string, err error) {
	n, _ := deliveryCount(d.Headers)
	c.log.Warn(EventRequeued, "message_id", d.MessageId, "attempt", d.attempt, "why", why,
		"delivery_count", n, "error", err)
	c.b.hooks.emit(d.sub.ctx, Event{Name: EventRequeued, Queue: c.queue, Attempt: d.attempt, Kind: why, Err: err})
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

func (c *Consumer) finish(err error) {
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
	for i := len(c.built) - 1; i >= 0; i-- {
		if s, ok := c.built[i].(Stopper); ok {
			if serr := s.Stop(ctx); serr != nil {
				errs = append(errs, fmt.Errorf("mq: consumer of %q: at stop: %w", c.queue, serr))
			}
		}
	}
	c.closeHops()
	c.endLife()
	c.b.unregister(nil, c)
	c.err = errors.Join(errs...)
	close(c.done)
}

// attemptHandler sits between the middleware and the application's
// handler: it numbers attempts (every call after the first is the next
// attempt of the same delivery) and runs the AttemptHooks.
type attemptHandler struct {
	next  Handler
	hooks []AttemptHook
}

func (a *attemptHandler) Handle(ctx context.Context, d *Delivery) (err error) {
	if d.calls > 0 {
		d.attempt++
	}
	d.calls++
	if len(a.hooks) == 0 {
		err = a.next.Handle(ctx, d)
		d.finished(err)
		return err
	}
	for _, h := range a.hooks {
		ctx = h.OnAttempt(ctx, d)
	}
	defer func() {
		if r := recover(); r != nil {
			d.finished(errPanicked)
			pe := NewPanicError(r)
			for i := len(a.hooks) - 1; i >= 0; i-- {
				a.hooks[i].OnAttemptDone(ctx, d, pe)
			}
			panic(r)
		}
	}()
	err = a.next.Handle(ctx, d)
	d.finished(err)
	for i := len(a.hooks) - 1; i >= 0; i-- {
		a.hooks[i].OnAttemptDone(ctx, d, err)
	}
	return err
}

// finished notes that the attempt the handler just returned from counts as
// used — unless the consumer cut it short (lost channel, stop deadline):
// then its redelivery is the same attempt again.
//
// It is also where a success becomes the ack outcome, so the middleware
// around the handler reads OutcomeAck before the runtime settles.
func (d *Delivery) finished(err error) {
	if d.sub == nil || d.sub.ctx.Err() == nil {
		d.used = d.attempt
	}
	if err == nil && d.outcome == "" {
		d.outcome = OutcomeAck
	}
}

// errPanicked stands for the error of an attempt that panicked.
var errPanicked = errors.New("mq: the handler panicked")

// PanicError is a panic recovered from a handler, as an error.
type PanicError struct {
	Value any
	Stack []byte
}

// NewPanicError captures a recovered value and the current stack.
func NewPanicError(v any) *PanicError { return &PanicError{Value: v, Stack: debug.Stack()} }

func (e *PanicError) Error() string { return fmt.Sprintf("panic: %v", e.Value) }

// Unwrap returns the panic value if it was an error.
func (e *PanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}
