package mq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Broker owns one supervised connection to RabbitMQ and hands out channels.
// Create it with [New] (or [Dial]), Start it, and Close it when done. All
// methods are safe for concurrent use.
type Broker struct {
	cfg   Config
	log   *slog.Logger
	hooks hookSet

	loginOnce sync.Once
	loginName string

	mu         sync.Mutex
	state      *conn         // the live connection; nil while there is none
	changed    chan struct{} // closed and replaced whenever state changes
	started    bool
	closed     bool
	life       context.Context // ends at Close
	endLife    context.CancelFunc
	supDone    chan struct{}
	next       int          // index of the next URL to dial
	frameSize  atomic.Int64 // frame_max of the last connection (0: none yet)
	gen        uint64
	publishers map[*Publisher]struct{}
	consumers  map[*Consumer]struct{}
	reg        remembered // what Declare declared, to declare again (recovery.go)

	calls      sync.WaitGroup // goroutines of bounded calls and background channel closes (see spawn)
	callsEnded bool           // Close waits for calls: spawn starts no more
}

// New returns a [Broker] for cfg. It does not connect: Start does.
func New(cfg Config) *Broker {
	cfg = cfg.withDefaults()
	b := &Broker{cfg: cfg, log: cfg.Logger, changed: make(chan struct{}),
		publishers: map[*Publisher]struct{}{}, consumers: map[*Consumer]struct{}{}}
	b.life, b.endLife = context.WithCancel(context.Background())
	b.hooks.add(cfg.Hooks...)
	return b
}

// Logger is the logger the broker and everything built on it log to.
func (b *Broker) Logger() *slog.Logger { return b.log }

// Start connects, trying each URL in turn with backoff until one answers or
// ctx ends; a broker that does not answer fails at ctx's deadline with the
// last error, it does not hang. Refused credentials fail at once. Once
// started, the connection is supervised until Close: when it is lost, it is
// redialled forever, and publishers and consumers reopen their channels on
// the new one.
func (b *Broker) Start(ctx context.Context) error {
	if err := b.cfg.validate(); err != nil {
		return err
	}
	if err := b.hooks.check(); err != nil {
		return err
	}
	b.mu.Lock()
	switch {
	case b.closed:
		b.mu.Unlock()
		return ErrClosed
	case b.started:
		b.mu.Unlock()
		return errors.New("mq: broker already started")
	}
	b.started = true
	b.mu.Unlock()

	c, err := b.dialUntil(ctx)
	if err != nil {
		b.mu.Lock()
		b.started = false
		b.mu.Unlock()
		return err
	}
	b.mu.Lock()
	if b.closed { // Close ran while we dialled
		b.mu.Unlock()
		_ = c.c.Close()
		return ErrClosed
	}
	b.supDone = make(chan struct{})
	b.setStateLocked(c)
	b.mu.Unlock()
	b.log.Info("acemq.connection.open", "url", c.url, "name", b.cfg.ConnectionName)
	go b.supervise(c)
	return nil
}

// frameMax is the frame_max of the last connection dialled, which is the
// live one while there is one, or amqp091-go's default before the first:
// what a hop is fitted to. It takes no lock: every hop publish asks.
func (b *Broker) frameMax() int {
	if n := b.frameSize.Load(); n > 0 {
		return int(n)
	}
	return defaultFrameMax
}

// stallAfter is how long a write to the socket may move no byte before the
// connection is declared dead (see socket): two heartbeat intervals, when
// the broker would have given up on the connection too.
func (b *Broker) stallAfter() time.Duration {
	return max(2*b.cfg.Heartbeat, time.Second)
}

// setStateLocked publishes c (nil: no connection) and wakes every waiter.
func (b *Broker) setStateLocked(c *conn) {
	b.state = c
	close(b.changed)
	b.changed = make(chan struct{})
}

// supervise watches the live connection and redials when it is lost, until
// Close.
func (b *Broker) supervise(c *conn) {
	defer close(b.supDone)
	g := flapGuard{upAt: time.Now()}
	for {
		err := b.watch(c)
		b.mu.Lock()
		if b.state == c {
			b.setStateLocked(nil)
		}
		b.mu.Unlock()
		close(c.lost)
		c.setBlocked(false, "")
		if b.life.Err() != nil {
			// Close is closing the connection politely, here (watch) or in
			// Close, whichever came first: let that end before the socket
			// is closed, or the socket, closed before the broker's
			// close-ok was read, would be reset (see socket.Close). Close
			// aborts the socket when its context ends, which ends this too.
			_ = c.c.Close()
			// amqp091-go closes c.closes at the end of its shutdown.
			for range c.closes {
			}
			if c.netc != nil {
				_ = c.netc.Close()
			}
			return
		}
		// The connection is gone: so is its socket, now. amqp091-go closes
		// it only at the end of its shutdown, which waits for the lock of
		// a publish blocked writing to that very socket.
		if c.netc != nil {
			_ = c.netc.Close()
		}
		b.log.Warn(EventConnectionLost, "url", c.url, "error", err)
		lostAt := time.Now()
		// A connection that died soon after it came up counts as a failed
		// attempt: the backoff goes on growing across such flaps.
		flaps := g.down(lostAt)
		if wait := b.flapWait(flaps); wait > 0 {
			if g.alarm() {
				b.log.Warn(EventConnectionFlapping, "url", c.url, "flaps", flaps, "error", err, "retry_in", wait)
				b.hooks.emit(context.Background(), Event{Name: EventConnectionFlapping, Err: err})
			}
			if !sleep(b.life, wait) {
				return
			}
		}
		for attempt := flaps; ; attempt++ {
			nc, derr := b.dialNext(b.life)
			if derr == nil {
				c = nc
				break
			}
			if b.life.Err() != nil {
				return
			}
			wait := b.backoff(attempt)
			b.log.Warn("acemq.connection.dial.failed", "error", derr, "retry_in", wait)
			if !sleep(b.life, wait) {
				return
			}
		}
		g.up(time.Now())
		// Before anyone gets the connection, what the broker forgot with
		// the last one is declared again, so consumers resubscribe to it.
		b.recoverOn(c)
		b.mu.Lock()
		if b.closed {
			b.mu.Unlock()
			_ = c.c.Close()
			return
		}
		b.setStateLocked(c)
		b.mu.Unlock()
		b.log.Info(EventConnectionRestored, "url", c.url, "after", time.Since(lostAt).Round(time.Millisecond))
	}
}

// watch blocks until c is lost or the broker closes, tracking
// connection.blocked on the way.
func (b *Broker) watch(c *conn) error {
	closes, blocks := c.closes, c.blocks
	for {
		select {
		case e, ok := <-closes:
			if !ok || e == nil {
				return errors.New("connection closed")
			}
			return e
		case bl, ok := <-blocks:
			if !ok {
				blocks = nil
				continue
			}
			c.setBlocked(bl.Active, bl.Reason)
			if bl.Active {
				b.log.Warn("acemq.connection.blocked", "url", c.url, "reason", bl.Reason)
			} else {
				b.log.Info("acemq.connection.unblocked", "url", c.url)
			}
		case <-b.life.Done():
			_ = c.c.Close()
			return ErrClosed
		}
	}
}

// current waits for a live connection, bounded by ctx.
func (b *Broker) current(ctx context.Context) (*conn, error) {
	for {
		b.mu.Lock()
		st, changed, closed, started := b.state, b.changed, b.closed, b.started
		b.mu.Unlock()
		switch {
		case closed:
			return nil, ErrClosed
		case !started:
			return nil, errNotStarted
		case st != nil && !st.isLost():
			return st, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, fmt.Errorf("mq: waiting for a connection to %s: %w", b.urlList(), ctx.Err())
		}
	}
}

// Ready reports whether the broker has a live connection now. Use it for
// readiness checks; WaitReady waits for one.
func (b *Broker) Ready() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state != nil && !b.state.isLost()
}

// WaitReady waits until the broker has a live connection, bounded by ctx.
func (b *Broker) WaitReady(ctx context.Context) error {
	_, err := b.current(ctx)
	return err
}

// closeGrace is how long Close waits for its goroutines to end once its
// context is over and the connection is aborted.
const closeGrace = 5 * time.Second

// Close stops every consumer (draining within ctx), closes every
// publisher, then the connection, and waits for the supervisor to end. It
// returns ctx's error if consumers could not drain in time. When ctx ends
// first, the TCP connection is cut instead of closed politely, so Close
// returns promptly even when the network went quiet. Calling Close again
// is a no-op.
func (b *Broker) Close(ctx context.Context) error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	// The connection live now is aborted too when ctx ends, also once the
	// supervisor has let go of it (b.state nil): its polite close, here or
	// in the supervisor, waits for a close-ok that a quiet network never
	// brings, and the supervisor leaves the socket to it (see supervise).
	first := b.state
	abort := context.AfterFunc(ctx, func() {
		for _, st := range []*conn{first, b.stateNow()} {
			if st != nil && st.netc != nil {
				_ = st.netc.Close()
			}
		}
	})
	defer abort()
	consumers := make([]*Consumer, 0, len(b.consumers))
	for c := range b.consumers {
		consumers = append(consumers, c)
	}
	b.mu.Unlock()

	var errs []error
	for _, c := range consumers {
		if err := c.Stop(ctx); err != nil {
			errs = append(errs, err)
		}
	}

	b.mu.Lock()
	b.closed = true
	publishers := make([]*Publisher, 0, len(b.publishers))
	for p := range b.publishers {
		publishers = append(publishers, p)
	}
	st, supDone := b.state, b.supDone
	b.mu.Unlock()
	for _, p := range publishers {
		p.close(ctx)
	}
	b.endLife()
	if st != nil {
		_ = st.c.Close()
	}
	b.mu.Lock()
	b.setStateLocked(nil)
	b.callsEnded = true
	b.mu.Unlock()
	// Everything left ends with the connection: the supervisor, bounded
	// calls still waiting for the broker, background channel closes.
	ended := make(chan struct{})
	go func() {
		if supDone != nil {
			<-supDone
		}
		b.calls.Wait()
		close(ended)
	}()
	select {
	case <-ended:
		return errors.Join(errs...)
	case <-ctx.Done():
	}
	if st != nil && st.netc != nil {
		_ = st.netc.Close()
	}
	t := time.NewTimer(closeGrace)
	defer t.Stop()
	select {
	case <-ended:
		if len(errs) == 0 {
			errs = append(errs, fmt.Errorf("mq: close: %w", ctx.Err()))
		}
	case <-t.C:
		errs = append(errs, fmt.Errorf("mq: close: %w; the connection's goroutines did not end", ctx.Err()))
	}
	return errors.Join(errs...)
}

func (b *Broker) register(p *Publisher, c *Consumer) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return ErrClosed
	}
	if p != nil {
		b.publishers[p] = struct{}{}
	}
	if c != nil {
		b.consumers[c] = struct{}{}
	}
	return nil
}

func (b *Broker) unregister(p *Publisher, c *Consumer) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.publishers, p)
	delete(b.consumers, c)
}

func (b *Broker) stateNow() *conn {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state
}

// login is the user name the broker's connections log in with (the first
// URL's; AceMQ expects one login per Broker), parsed once.
func (b *Broker) login() string {
	b.loginOnce.Do(func() {
		if len(b.cfg.URLs) > 0 {
			if u, err := amqp.ParseURI(b.cfg.URLs[0]); err == nil {
				b.loginName = u.Username
			}
		}
	})
	return b.loginName
}
