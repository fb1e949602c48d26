package mq

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"strconv"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// dialUntil tries the URLs in turn until one connects or ctx ends.
func (b *Broker) dialUntil(ctx context.Context) (*conn, error) {
	var last error
	for attempt := 0; ; attempt++ {
		c, err := b.dialNext(ctx)
		if err == nil {
			return c, nil
		}
		if permanent(err) {
			return nil, err
		}
		if pastDeadline(ctx) {
			// The deadline cut this dial short: its error says only that
			// (a context error, or an i/o timeout when the socket's own
			// deadline, set from ctx's, fired first), so the one before it
			// (a refusal, say) is the one to report.
			if last == nil {
				last = err
			}
			break
		}
		last = err
		if round := (attempt + 1) / len(b.cfg.URLs); (attempt+1)%len(b.cfg.URLs) == 0 {
			// Every URL was tried once more: back off before the next round.
			if !sleep(ctx, b.backoff(round-1)) {
				break
			}
		}
	}
	cause := ctx.Err()
	if cause == nil {
		// The socket's deadline came before ctx's timer fired.
		cause = context.DeadlineExceeded
	}
	return nil, fmt.Errorf("mq: could not connect to %s before the deadline: %w (last error: %v)",
		b.urlList(), cause, last)
}

// pastDeadline reports whether ctx has ended or its deadline has come
// (a socket deadline taken from it can fire before ctx's own timer).
func pastDeadline(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	d, ok := ctx.Deadline()
	return ok && !time.Now().Before(d)
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
			g.closedOK = &sc.closedOK
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

// isNetError reports whether err came from the socket itself (a broken
// pipe, a reset, a closed connection): amqp091-go shuts such a connection
// down, so the caller waits for the next one rather than failing.
func isNetError(err error) bool {
	var ne *net.OpError
	return errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed)
}
