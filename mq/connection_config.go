package mq

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Version is this library's version, sent to the broker as the client's
// product version and used as the OpenTelemetry instrumentation version.
const Version = "0.1.0"

// Defaults for [Config] fields left zero.
const (
	defaultHeartbeat    = 10 * time.Second
	defaultDialTimeout  = 10 * time.Second
	defaultReconnectMin = 100 * time.Millisecond
	defaultReconnectMax = 10 * time.Second
)

// Config is what a [Broker] connects with.
type Config struct {
	// URLs are the broker addresses (amqp:// or amqps://), tried in turn,
	// starting over after the last: give every node of a cluster. Required.
	URLs []string
	// ConnectionName is shown in the management UI. Default: the program's
	// name.
	ConnectionName string
	// TLS configures amqps:// URLs. Default: what the URL's cacertfile,
	// certfile, keyfile and server_name_indication parameters say, as
	// amqp091-go reads them (the system's roots when no cacertfile), with
	// peer verification on. Either way the URL's host is the server name
	// unless one is set.
	TLS *tls.Config
	// Heartbeat is the AMQP heartbeat interval. Default 10 s. A write to
	// the socket that moves no byte for twice this, and at least a second
	// (while the broker has not sent connection.blocked), ends the
	// connection.
	Heartbeat time.Duration
	// DialTimeout bounds one connection attempt (TCP, TLS and AMQP
	// handshake), within the caller's context. Default 10 s.
	DialTimeout time.Duration
	// ReconnectMin and ReconnectMax bound the jittered exponential backoff
	// between connection attempts (and a consumer's resubscribes).
	// Defaults 100 ms and 10 s. A connection or subscription that dies
	// within 5 s of coming up counts as a failed attempt, so the
	// backoff keeps growing across flaps; it resets only once one stayed
	// up for 5 s.
	ReconnectMin time.Duration
	ReconnectMax time.Duration
	// Logger receives the library's log records, and is the only place a
	// logger is given: the Broker's consumers and publishers, and the
	// middleware they run, log to it ([Broker.Logger], [Delivery.Logger]).
	// Default slog.Default().
	Logger *slog.Logger
	// NoRedeclare stops the [Broker] from declaring again what it declared
	// ([Broker.Declare]) when the broker forgot it: exclusive, auto-delete
	// and transient queues and exchanges after a reconnect, and a queue
	// found missing under its consumer. Default false: the library
	// declares them again (docs/recovery.md). Set it for a service that
	// must not create queues; its consumers then retry a missing queue
	// with backoff until somebody else declares it.
	NoRedeclare bool
	// Hooks instrument the Broker: values implementing any of
	// [PublishHook], [DeliveryHook], [AttemptHook] and [EventHook]
	// (otelmq.New returns one). They see every publish (the library's own
	// hops included) and every delivery of every consumer of the Broker,
	// in the order given; nil entries are skipped, and a value that
	// implements none of the interfaces makes Start fail. Hooks observe:
	// they must be quick, must not block, and must not keep the values
	// they are given past the call. New reads them once.
	Hooks []any
}

func (c Config) withDefaults() Config {
	if c.ConnectionName == "" {
		c.ConnectionName = filepath.Base(os.Args[0])
	}
	if c.Heartbeat == 0 {
		c.Heartbeat = defaultHeartbeat
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = defaultDialTimeout
	}
	if c.ReconnectMin == 0 {
		c.ReconnectMin = defaultReconnectMin
	}
	if c.ReconnectMax == 0 {
		c.ReconnectMax = defaultReconnectMax
	}
	if c.ReconnectMax < c.ReconnectMin {
		c.ReconnectMax = c.ReconnectMin
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

func (c Config) validate() error {
	var errs []error
	if len(c.URLs) == 0 {
		errs = append(errs, errors.New("mq: Config.URLs is empty"))
	}
	for i, u := range c.URLs {
		p, err := url.Parse(u)
		switch {
		case err != nil || (p.Scheme != "amqp" && p.Scheme != "amqps") || p.Host == "":
			errs = append(errs, fmt.Errorf("mq: Config.URLs[%d] %s is not an amqp:// or amqps:// URL", i, Redact(u)))
		case mangledCredentials(u):
			errs = append(errs, fmt.Errorf("mq: Config.URLs[%d]: the user name or password did not parse; percent-encode '#', '?', '/' and '@' in them", i))
		}
	}
	if c.Heartbeat < 0 || c.DialTimeout < 0 || c.ReconnectMin < 0 || c.ReconnectMax < 0 {
		errs = append(errs, errors.New("mq: Config durations must not be negative"))
	}
	return errors.Join(errs...)
}

// Redact returns u with its password replaced, safe to log: credentials
// never appear in this library's logs, errors or span attributes. Query
// parameters that may carry secrets are hidden too, and the fragment is
// dropped. A URL that does not parse is not printed at all, nor is one
// whose credentials did not parse as credentials (an unescaped '#', '?' or
// '/' in a password moves the rest of it into another part of the URL).
// A keyword/value connection string (PostgreSQL's "host=db password=…")
// keeps its keywords and loses the value of every one naming a password,
// quoted or not; one that is not keyword=value throughout is not printed.
func Redact(u string) string {
	if !strings.Contains(u, "://") && strings.Contains(u, "=") {
		return redactKeywords(u)
	}
	p, err := url.Parse(u)
	if err != nil || p.Opaque != "" {
		return "<unparseable URL>"
	}
	if mangledCredentials(u) {
		return "<URL with unparseable credentials: percent-encode them>"
	}
	if p.User != nil {
		if _, has := p.User.Password(); has {
			p.User = url.UserPassword(p.User.Username(), "xxxxx")
		}
	}
	p.RawQuery = redactQuery(p.Query())
	p.ForceQuery = false
	p.Fragment, p.RawFragment = "", ""
	return p.String()
}

// redactKeywords is Redact for a keyword/value connection string, as
// libpq reads one: keyword = value pairs apart by spaces, a value either
// single-quoted (a backslash escapes the next character) or up to the next
// space.
func redactKeywords(s string) string {
	var out []string
	for i := 0; ; {
		for i < len(s) && isSpace(s[i]) {
			i++
		}
		if i == len(s) {
			return strings.Join(out, " ")
		}
		k := i
		for i < len(s) && isKeywordByte(s[i]) {
			i++
		}
		key := s[k:i]
		for i < len(s) && isSpace(s[i]) {
			i++
		}
		if key == "" || i == len(s) || s[i] != '=' {
			return "<unparseable connection string>"
		}
		i++
		for i < len(s) && isSpace(s[i]) {
			i++
		}
		secret := strings.Contains(strings.ToLower(key), "password")
		if !secret && startsKeyword(s[i:]) {
			// "host= password=…": libpq would take the password
			// pair for host's value; read it as a pair, so it is hidden.
			out = append(out, key+"=")
			continue
		}
		v := i
		if i < len(s) && s[i] == '\'' {
			for i++; i < len(s) && s[i] != '\''; i++ {
				if s[i] == '\\' {
					i++
				}
			}
			if i >= len(s) {
				return "<unparseable connection string>" // libpq refuses it too
			}
			i++
		} else {
			for ; i < len(s) && !isSpace(s[i]); i++ {
				if s[i] == '\\' {
					i++
				}
			}
			i = min(i, len(s))
		}
		val := s[v:i]
		if secret {
			val = "xxxxx"
		}
		out = append(out, key+"="+val)
	}
}

// startsKeyword reports whether s begins with a keyword and its '='.
func startsKeyword(s string) bool {
	i := 0
	for i < len(s) && isKeywordByte(s[i]) {
		i++
	}
	if i == 0 {
		return false
	}
	for i < len(s) && isSpace(s[i]) {
		i++
	}
	return i < len(s) && s[i] == '='
}

func isKeywordByte(c byte) bool { return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'
}

// mangledCredentials reports an '@' after the URL's authority: user info
// with an unescaped '/', '?' or '#' in it, which ends the authority early
// and moves the rest of the password into the path, query or fragment (and
// its start into the host or port). Such a URL is never printed. A literal
// '@' in a path or query (rather than %40) is taken for one too.
func mangledCredentials(u string) bool {
	i := strings.Index(u, "//")
	if i < 0 {
		return false
	}
	rest := u[i+2:]
	end := strings.IndexAny(rest, "/?#")
	return end >= 0 && strings.Contains(rest[end:], "@")
}

// redactQuery hides query parameters that can carry secrets (TLS key
// passwords and the like) while keeping the harmless ones readable.
func redactQuery(q url.Values) string {
	for k := range q {
		switch k {
		case "heartbeat", "connection_timeout", "channel_max", "frame_max", "auth_mechanism", "server_name_indication":
		default:
			q[k] = []string{"xxxxx"}
		}
	}
	return q.Encode()
}
