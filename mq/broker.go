package mq

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Broker owns one supervised connection to RabbitMQ and hands out channels.
// Create it with New (or Dial), Start it, and Close it when done. All
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

	calls      sync.WaitGroup // goroutines of bounded calls and background channel closes (see spawn)
	callsEnded bool           // Close waits for calls: spawn starts no more
}

// conn is one generation of the connection.
type conn struct {
	c      *amqp.Connection
	netc   *socket // the TCP connection under c: closing it aborts everything on c
	closes chan *amqp.Error
	blocks chan amqp.Blocking
	gen    uint64
	url    string // redacted
	server string // host:port
	lost   chan struct{}

	blocked   atomic.Bool // unblocked != nil, read without the lock on every publish
	blockMu   sync.Mutex
	unblocked chan struct{} // non-nil while the broker blocks publishing
	reason    string
}

// New returns a Broker for cfg. It does not connect: Start does.
func New(cfg Config, opts ...Option) *Broker {
	cfg = cfg.withDefaults()
	b := &Broker{cfg: cfg, log: cfg.Logger, changed: make(chan struct{}),
		publishers: map[*Publisher]struct{}{}, consumers: map[*Consumer]struct{}{}}
	b.life, b.endLife = context.WithCancel(context.Background())
	for _, o := range opts {
		if o != nil {
			o.apply(b)
		}
	}
	return b
}

// Dial is New with a single URL followed by Start.
func Dial(ctx context.Context, url string, opts ...Option) (*Broker, error) {
	b := New(Config{URLs: []string{url}}, opts...)
	if err := b.Start(ctx); err != nil {
		return nil, err
	}
	return b, nil
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

// dialUntil tries the URLs in turn until one connects or ctx ends.
func (b *Broker) dialUntil(ctx context.Context) (*conn, error) {
	var last error
	for attempt := 0; ; attempt++ {
		c, err := b.dialNext(ctx)
		if err == nil {
			return c, nil
		}
		last = err
		if permanent(err) {
			return nil, err
		}
		if ctx.Err() != nil {
			break
		}
		if round := (attempt + 1) / len(b.cfg.URLs); (attempt+1)%len(b.cfg.URLs) == 0 {
			// Every URL was tried once more: back off before the next round.
			if !sleep(ctx, b.backoff(round-1)) {
				break
			}
		}
	}
	return nil, fmt.Errorf("mq: could not connect to %s before the deadline: %w (last error: %v)",
		b.urlList(), ctx.Err(), last)
}

func (b *Broker) urlList() string {
	s := ""
	for i, u := range b.cfg.URLs {
		if i > 0 {
			s += ", "
		}
		s += Redact(u)
	}
	return s
}

// permanent reports whether a dial error will not go away by trying again
// soon: refused credentials or a virtual host the user may not open.
func permanent(err error) bool {
	if errors.Is(err, amqp.ErrCredentials) || errors.Is(err, amqp.ErrVhost) || errors.Is(err, amqp.ErrSASL) {
		return true
	}
	// A certificate the client does not trust, or a TLS client talking to a
	// plain listener, will not be different a second from now either.
	var cve *tls.CertificateVerificationError
	var rhe tls.RecordHeaderError
	if errors.As(err, &cve) || errors.As(err, &rhe) {
		return true
	}
	var ae *amqp.Error
	return errors.As(err, &ae) && (ae.Code == codeAccessRefused || ae.Code == 530)
}

// dialNext dials the next URL in the rotation once.
func (b *Broker) dialNext(ctx context.Context) (*conn, error) {
	b.mu.Lock()
	raw := b.cfg.URLs[b.next%len(b.cfg.URLs)]
	b.next++
	b.gen++
	gen := b.gen
	b.mu.Unlock()

	red := Redact(raw)
	ac, netc, server, err := b.dial(ctx, raw)
	if err != nil {
		var ae *amqp.Error
		if errors.As(err, &ae) && (ae.Server || ae.Code == codeAccessRefused) {
			// A refusal (403: credentials, SASL or vhost, which amqp091-go
			// reports as client-side errors; 530 and the like from the
			// broker): errors.Is matches it by reply code, as for every
			// other refusal. A lost socket (501 EOF) is not one.
			return nil, &BrokerError{Op: "connect to " + red, Code: ae.Code, Reason: ae.Reason, Err: err}
		}
		return nil, fmt.Errorf("mq: dial %s: %w", red, err)
	}
	c := &conn{c: ac, netc: netc, gen: gen, url: red, server: server, lost: make(chan struct{})}
	// Registered the moment the connection is open (not when the
	// supervisor gets to it), so a connection.blocked the broker sends
	// right after open is seen.
	c.blocks = ac.NotifyBlocked(make(chan amqp.Blocking, 4))
	c.closes = ac.NotifyClose(make(chan *amqp.Error, 1))
	netc.release() // see socket: frames after open-ok reach amqp091-go only now
	b.frameSize.Store(int64(c.frameMax()))
	return c, nil
}

// tlsConfig returns, for an amqps:// URL, the TLS configuration to dial
// with — Config.TLS, or else the one the URL's cacertfile, certfile,
// keyfile and server_name_indication describe, as amqp091-go would build
// it, with the URL's host as server name when none is set — and the URL
// as amqp:// with its port spelled out. Other URLs come back as they are.
func (b *Broker) tlsConfig(raw string) (*tls.Config, string, error) {
	uri, err := amqp.ParseURI(raw)
	if err != nil || uri.Scheme != "amqps" {
		return nil, raw, nil // amqp091-go reports a URL it cannot parse
	}
	var cfg *tls.Config
	if b.cfg.TLS != nil {
		cfg = b.cfg.TLS.Clone()
	} else {
		cfg = &tls.Config{ServerName: uri.ServerName, MinVersion: tls.VersionTLS12}
		if uri.CACertFile != "" {
			pem, err := os.ReadFile(uri.CACertFile)
			if err != nil {
				return nil, "", fmt.Errorf("mq: read CA certificate: %w", err)
			}
			cfg.RootCAs = x509.NewCertPool()
			cfg.RootCAs.AppendCertsFromPEM(pem)
		}
		if uri.CertFile != "" && uri.KeyFile != "" {
			cert, err := tls.LoadX509KeyPair(uri.CertFile, uri.KeyFile)
			if err != nil {
				return nil, "", fmt.Errorf("mq: load client certificate: %w", err)
			}
			cfg.Certificates = []tls.Certificate{cert}
		}
	}
	if cfg.ServerName == "" {
		cfg.ServerName = uri.Host
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, raw, nil
	}
	u.Scheme = "amqp"
	u.Host = net.JoinHostPort(uri.Host, strconv.Itoa(uri.Port))
	return cfg, u.String(), nil
}

// frameMax is the frame_max negotiated on c.
func (c *conn) frameMax() int { return c.c.Config.FrameSize }

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

// dial opens one AMQP connection; the TCP connect, TLS and AMQP handshakes
// all end at ctx's end or after DialTimeout, whichever comes first.
func (b *Broker) dial(ctx context.Context, raw string) (*amqp.Connection, *socket, string, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, "", err
	}
	// TLS is done here rather than by amqp091-go, so that the open gate
	// (see gate) sits above it and sees plain frames: amqp091-go is given
	// the URL as amqp:// with its port spelled out.
	tlsCfg, dialURL, err := b.tlsConfig(raw)
	if err != nil {
		return nil, nil, "", err
	}
	var (
		mu     sync.Mutex
		netc   *socket
		server string
	)
	stop := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		if netc != nil {
			_ = netc.Close()
		}
	})
	props := amqp.NewConnectionProperties()
	props.SetClientConnectionName(b.cfg.ConnectionName)
	props["product"] = "AceMQ for Go"
	props["version"] = Version
	acfg := amqp.Config{
		Heartbeat:  b.cfg.Heartbeat,
		Properties: props,
		Locale:     "en_US",
		Dial: func(network, addr string) (net.Conn, error) {
			deadline := time.Now().Add(b.cfg.DialTimeout)
			if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
				deadline = d
			}
			d := net.Dialer{Deadline: deadline}
			c, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			sc := newSocket(c, b.stallAfter())
			_ = sc.SetDeadline(deadline)
			mu.Lock()
			netc, server = sc, addr
			mu.Unlock()
			var top net.Conn = sc
			if tlsCfg != nil {
				tc := tls.Client(sc, tlsCfg)
				if err := tc.HandshakeContext(ctx); err != nil {
					_ = sc.Close()
					return nil, err
				}
				top = tc
			}
			// Under mu: the AfterFunc's Close reads sc.gate (to open it).
			g := newGate(top)
			mu.Lock()
			sc.gate = g
			mu.Unlock()
			return g, nil
		},
	}
	ac, err := amqp.DialConfig(dialURL, acfg)
	if !stop() && err == nil { // ctx ended as the handshake finished
		mu.Lock()
		if netc != nil {
			_ = netc.Close() // the AfterFunc closed it: this only opens the gate
		}
		mu.Unlock()
		_ = ac.Close()
		return nil, nil, "", ctx.Err()
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, nil, "", fmt.Errorf("%w (%v)", ctx.Err(), err)
		}
		return nil, nil, "", err
	}
	mu.Lock()
	defer mu.Unlock()
	return ac, netc, server, nil
}

func (b *Broker) backoff(n int) time.Duration {
	d := b.cfg.ReconnectMin
	for i := 0; i < n && d < b.cfg.ReconnectMax; i++ {
		d *= 2
	}
	d = min(d, b.cfg.ReconnectMax)
	// Jitter: somewhere in [d/2, d], so a fleet does not redial in step.
	return d/2 + rand.N(d/2+1)
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
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
		// The connection is gone: so is its socket, now. amqp091-go closes
		// it only at the end of its shutdown, which waits for the lock of
		// a publish blocked writing to that very socket.
		if c.netc != nil {
			_ = c.netc.Close()
		}
		if b.life.Err() != nil {
			_ = c.c.Close()
			return
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

func (c *conn) setBlocked(active bool, reason string) {
	c.blockMu.Lock()
	defer c.blockMu.Unlock()
	switch {
	case active && c.unblocked == nil:
		c.unblocked, c.reason = make(chan struct{}), reason
		c.blocked.Store(true)
	case !active && c.unblocked != nil:
		close(c.unblocked)
		c.unblocked, c.reason = nil, ""
		c.blocked.Store(false)
	}
	if c.netc != nil {
		c.netc.blocked.Store(c.unblocked != nil)
	}
}

// waitUnblocked waits while the broker blocks publishing on c (a resource
// alarm), bounded by ctx.
func (c *conn) waitUnblocked(ctx context.Context) error {
	if !c.blocked.Load() {
		return nil
	}
	c.blockMu.Lock()
	ch, reason := c.unblocked, c.reason
	c.blockMu.Unlock()
	if ch == nil {
		return nil
	}
	select {
	case <-ch:
		return nil
	case <-c.lost:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("mq: the broker blocks publishing (%s): %w", reason, ctx.Err())
	}
}

// blockedErr adds the broker's reason to err when the broker blocks this
// connection: a call that ran out of time then says why.
func (c *conn) blockedErr(err error) error {
	if c == nil || !c.blocked.Load() {
		return err
	}
	reason, blocked := c.blockState()
	if !blocked {
		return err
	}
	return fmt.Errorf("mq: the broker blocks publishing (%s): %w", reason, err)
}

// blockState reports whether the broker blocks publishing on c, and the
// reason it gave.
func (c *conn) blockState() (reason string, blocked bool) {
	c.blockMu.Lock()
	defer c.blockMu.Unlock()
	return c.reason, c.unblocked != nil
}

func (c *conn) isLost() bool {
	select {
	case <-c.lost:
		return true
	default:
		return c.c.IsClosed()
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
			return nil, ErrNotStarted
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

// Blocked reports whether the broker currently blocks publishing on this
// connection (connection.blocked: a memory or disk alarm).
func (b *Broker) Blocked() bool {
	b.mu.Lock()
	st := b.state
	b.mu.Unlock()
	if st == nil {
		return false
	}
	_, blocked := st.blockState()
	return blocked
}

// Channel hands out a new channel on the live connection (waiting for one,
// bounded by ctx). The caller owns it: it is nobody else's, it does not
// survive a reconnect, and the caller must close it. Publishers, consumers,
// declarations and inspection all get their own this way.
func (b *Broker) Channel(ctx context.Context) (*amqp.Channel, error) {
	ch, _, err := b.channel(ctx)
	return ch, err
}

func (b *Broker) channel(ctx context.Context) (*amqp.Channel, *conn, error) {
	for {
		st, err := b.current(ctx)
		if err != nil {
			return nil, nil, err
		}
		var ch *amqp.Channel
		err = b.bounded(ctx, func() (err error) {
			ch, err = st.c.Channel()
			return err
		}, func() {
			if ch != nil {
				_ = ch.Close()
			}
		})
		if err == nil {
			return ch, st, nil
		}
		if ctx.Err() != nil {
			// A blocked connection stops answering channel.open too.
			return nil, nil, st.blockedErr(fmt.Errorf("mq: open channel: %w", err))
		}
		if !st.isLost() && !errors.Is(err, amqp.ErrClosed) && !isNetError(err) {
			return nil, nil, brokerError("open channel", err)
		}
		// The connection went as we asked (a write that failed on the
		// socket means it is going, even before the supervisor has seen
		// it); wait for the next one.
		select {
		case <-st.lost:
		case <-ctx.Done():
			return nil, nil, fmt.Errorf("mq: open channel: %w", ctx.Err())
		}
	}
}

// bounded runs fn, which makes amqp091-go calls that take no context, so
// that ctx bounds the wait: those calls return on a network gone quiet only
// when the heartbeat declares the connection dead, after up to three
// intervals. When ctx ends first, bounded returns ctx's error and fn
// carries on, on a goroutine the broker owns, until the broker answers or
// the connection dies (Close aborts it); abandoned then runs on that
// goroutine, to undo what fn did (close the channel it opened). A ctx that
// never ends costs no goroutine.
func (b *Broker) bounded(ctx context.Context, fn func() error, abandoned func()) error {
	if ctx.Done() == nil {
		return fn()
	}
	if err := ctx.Err(); err != nil {
		if abandoned != nil && !b.spawn(abandoned) { // fn never ran: undo what led to it
			abandoned()
		}
		return err
	}
	var claimed atomic.Bool // by the goroutine to deliver fn's result, or by the caller to give up
	res := make(chan error, 1)
	if !b.spawn(func() {
		err := fn()
		if claimed.CompareAndSwap(false, true) {
			res <- err
			return
		}
		if abandoned != nil {
			abandoned()
		}
	}) {
		return fn() // closed: the connection is gone, fn returns at once
	}
	select {
	case err := <-res:
		return err
	case <-ctx.Done():
		if claimed.CompareAndSwap(false, true) {
			return ctx.Err()
		}
		return <-res // fn finished as ctx ended: its result stands
	}
}

// closeLater closes a throwaway channel on a goroutine the broker owns:
// nobody needs to wait for the broker's close-ok.
func (b *Broker) closeLater(ch *amqp.Channel) {
	if !b.spawn(func() { _ = ch.Close() }) {
		_ = ch.Close()
	}
}

// spawn runs fn on a goroutine Close waits for, unless Close is already
// waiting; then it reports false and starts nothing.
func (b *Broker) spawn(fn func()) bool {
	b.mu.Lock()
	if b.callsEnded {
		b.mu.Unlock()
		return false
	}
	b.calls.Add(1)
	b.mu.Unlock()
	go func() {
		defer b.calls.Done()
		fn()
	}()
	return true
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
	abort := context.AfterFunc(ctx, func() {
		if st := b.stateNow(); st != nil && st.netc != nil {
			_ = st.netc.Close()
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

// isNetError reports whether err came from the socket itself (a broken
// pipe, a reset, a closed connection): amqp091-go shuts such a connection
// down, so the caller waits for the next one rather than failing.
func isNetError(err error) bool {
	var ne *net.OpError
	return errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed)
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
