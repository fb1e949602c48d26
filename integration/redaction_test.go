//go:build integration

package integration

// The redaction suite: no log record, error string, span or metric
// attribute ever carries the password of a URL the library was given. Its
// helpers start with redact.
//
// It runs against the shared broker with a user of its own (created with
// rabbitmqctl, a unique password, deleted at the end), because the test
// broker's guest:guest URL cannot tell the password from the user name.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/acemq/acemq-go/internal/testenv"
	"github.com/acemq/acemq-go/middleware"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/otelmq"
	"github.com/acemq/acemq-go/retry"
	"github.com/acemq/acemq-go/topology"
)

// redactCapture keeps every log record (Debug and up, attributes and all,
// rendered by slog's text handler) and every error the test saw.
type redactCapture struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	records int
	errs    []string
	h       slog.Handler
}

func newRedactCapture() *redactCapture {
	c := &redactCapture{}
	c.h = slog.NewTextHandler(redactWriter{c}, &slog.HandlerOptions{Level: slog.LevelDebug})
	return c
}

type redactWriter struct{ c *redactCapture }

func (w redactWriter) Write(p []byte) (int, error) {
	w.c.mu.Lock()
	defer w.c.mu.Unlock()
	w.c.records++
	return w.c.buf.Write(p)
}

func (c *redactCapture) logger() *slog.Logger { return slog.New(c.h) }

// err notes an error the library returned (nil is ignored).
func (c *redactCapture) err(what string, err error) {
	if err == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.errs = append(c.errs, what+": "+err.Error())
}

func (c *redactCapture) logs() (string, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.String(), c.records
}

// redactSecret returns a password unique to this run, with characters a URL
// must escape, so the escaped form is checked too.
func redactSecret(t testing.TB, tag string) string {
	var b [10]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return "goit" + tag + "P@ss:w/rd%" + hex.EncodeToString(b[:])
}

// redactForms is every way a password can be spelled in text: as is, and
// escaped as a URL's userinfo or query carries it.
func redactForms(secret string) []string {
	forms := []string{secret, url.QueryEscape(secret), url.PathEscape(secret)}
	if u := url.UserPassword("x", secret).String(); strings.HasPrefix(u, "x:") {
		forms = append(forms, u[2:])
	}
	// The random tail alone is unique too: a password cut short, or spelled
	// some other way, still shows it.
	if i := strings.LastIndex(secret, "%"); i >= 0 {
		forms = append(forms, secret[i+1:])
	}
	return forms
}

// redactShows reports whether text shows secret in any of its forms, and
// which form.
func redactShows(text, secret string) (string, bool) {
	for _, form := range redactForms(secret) {
		if strings.Contains(text, form) {
			return form, true
		}
	}
	return "", false
}

// redactFormName names a form of secret without showing it.
func redactFormName(secret, form string) string {
	switch form {
	case secret:
		return "itself"
	case url.QueryEscape(secret):
		return "query-escaped"
	case url.PathEscape(secret):
		return "path-escaped"
	}
	if u := url.UserPassword("x", secret).String(); form == strings.TrimPrefix(u, "x:") {
		return "userinfo-escaped"
	}
	return "its random part"
}

// redactURL is the test broker's URL with the given credentials (host:port
// replaced when hostport is not empty).
func redactURL(t testing.TB, user, password, hostport string) string {
	u, err := url.Parse(testenv.URL())
	if err != nil {
		t.Fatalf("AMQP_URL: %v", err)
	}
	u.User = url.UserPassword(user, password)
	if hostport != "" {
		u.Host = hostport
	}
	return u.String()
}

// redactUser creates a user with password on the test broker, allowed
// everything on "/", and deletes it when the test ends.
func redactUser(t *testing.T, password string) string {
	t.Helper()
	var b [4]byte
	_, _ = rand.Read(b[:])
	user := "goit_redact_" + hex.EncodeToString(b[:])
	ctx := testenv.Context(t, 2*time.Minute)
	// The password goes in on stdin would be nicer; rabbitmqctl takes it as
	// an argument, which is this test's own process and never a log of
	// the library's.
	if _, err := testenv.Rabbitmqctl(ctx, "", "add_user", user, password); err != nil {
		t.Fatalf("add_user %s: %v", user, errors.New(strings.ReplaceAll(err.Error(), password, "<password>")))
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := testenv.Rabbitmqctl(ctx, "", "delete_user", user); err != nil {
			t.Errorf("delete_user %s: %v", user, err)
		}
	})
	if _, err := testenv.Rabbitmqctl(ctx, "", "set_permissions", "-p", "/", user, ".*", ".*", ".*"); err != nil {
		t.Fatalf("set_permissions %s: %v", user, err)
	}
	return user
}

func TestRedactionPasswordNeverShows(t *testing.T) {
	password := redactSecret(t, "Valid")
	wrong := redactSecret(t, "Wrong")
	nobody := redactSecret(t, "Nobody")
	secrets := map[string]string{"the user's password": password, "a wrong password": wrong, "an unknown user's password": nobody}
	user := redactUser(t, password)

	capture := newRedactCapture()
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	metrics := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(metrics))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = tp.Shutdown(ctx)
		_ = mp.Shutdown(ctx)
	})
	ins := otelmq.New(otelmq.WithTracerProvider(tp), otelmq.WithMeterProvider(mp),
		otelmq.WithPropagators(propagation.TraceContext{}))
	newBroker := func(urls ...string) *mq.Broker {
		return mq.New(mq.Config{URLs: urls, Logger: capture.logger(), Heartbeat: 2 * time.Second,
			ReconnectMin: 20 * time.Millisecond, ReconnectMax: 200 * time.Millisecond, Hooks: []any{ins}})
	}
	closeBroker := func(b *mq.Broker) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		capture.err("close", b.Close(ctx))
	}

	t.Run("valid URL: publish, consume, fail, park, refusals", func(t *testing.T) {
		b := newBroker(redactURL(t, user, password, ""))
		ctx := testenv.Context(t, time.Minute)
		if err := b.Start(ctx); err != nil {
			t.Fatalf("start with the user's URL: %v", errors.New(strings.ReplaceAll(err.Error(), password, "<password>")))
		}
		defer closeBroker(b)

		q := testenv.Name(t)
		p := retry.Exponential(2, 10*time.Millisecond)
		testenv.Cleanup(t, q, topology.DeadLetterQueue(q), topology.ParkedQueue(q))
		if err := b.Declare(ctx, topology.New().Queue(q, topology.Classic())); err != nil {
			t.Fatalf("declare: %v", err)
		}
		done := make(chan string, 8)
		c, err := b.Consume(ctx, q, mq.HandlerFunc(func(_ context.Context, d *mq.Delivery) error {
			defer func() { done <- d.MessageId }()
			switch string(d.Body) {
			case "fail":
				if d.Attempt() < p.Attempts() {
					return errors.New("fails until exhausted")
				}
				return errors.New("exhausted")
			case "park":
				return middleware.Park(errors.New("a person must look"))
			}
			return nil
		}), middleware.Standard(p))
		if err != nil {
			t.Fatalf("consume: %v", err)
		}
		pub := b.Publisher("")
		for _, body := range []string{"ok", "fail", "park"} {
			if err := pub.Publish(ctx, q, mq.Message{Body: []byte(body), MessageId: body}); err != nil {
				t.Fatalf("publish %s: %v", body, err)
			}
		}
		for seen := map[string]bool{}; len(seen) < 3; {
			select {
			case id := <-done:
				seen[id] = true
			case <-ctx.Done():
				t.Fatalf("not every message was handled: %v", seen)
			}
		}
		testenv.Eventually(t, 10*time.Second, func() bool {
			n, err := testenv.Ready(ctx, b, topology.DeadLetterQueue(q))
			m, err2 := testenv.Ready(ctx, b, topology.ParkedQueue(q))
			return err == nil && err2 == nil && n == 1 && m == 1
		}, "the failed and parked messages did not land in .dlq and .parked")
		capture.err("stop consumer", c.Stop(ctx))

		// Refusals the broker sends back, each an error to check.
		pubX := b.Publisher(testenv.Name(t, "no-such-exchange"))
		capture.err("publish to a missing exchange", pubX.Publish(ctx, "k", mq.Message{Body: []byte("x")}))
		capture.err("publish to a missing queue", pub.Publish(ctx, testenv.Name(t, "missing"), mq.Message{Body: []byte("x")}))
		_, err = b.Consume(ctx, testenv.Name(t, "missing"), mq.HandlerFunc(func(context.Context, *mq.Delivery) error { return nil }))
		capture.err("consume a missing queue", err)
		if err == nil {
			t.Error("consuming a missing queue succeeded")
		}
		capture.err("redeclare with other arguments", b.Declare(ctx, topology.New().Queue(q, topology.Quorum())))
		_, err = testenv.Ready(ctx, b, testenv.Name(t, "missing"))
		capture.err("count a missing queue", err)
	})

	t.Run("connection cut through a proxy", func(t *testing.T) {
		proxy, _ := testenv.Proxy(t)
		b := newBroker(redactURL(t, user, password, proxy.Addr()))
		ctx := testenv.Context(t, time.Minute)
		if err := b.Start(ctx); err != nil {
			t.Fatalf("start through the proxy: %v", errors.New(strings.ReplaceAll(err.Error(), password, "<password>")))
		}
		defer closeBroker(b)
		q := testenv.Name(t)
		testenv.Cleanup(t, q)
		if err := b.Declare(ctx, topology.New().Queue(q, topology.Classic())); err != nil {
			t.Fatalf("declare: %v", err)
		}
		pub := b.Publisher("")
		c, err := b.Consume(ctx, q, mq.HandlerFunc(func(context.Context, *mq.Delivery) error { return nil }))
		if err != nil {
			t.Fatalf("consume: %v", err)
		}
		for round := range 3 {
			if err := pub.Publish(ctx, q, mq.Message{Body: []byte("before cut")}); err != nil {
				t.Fatalf("publish: %v", err)
			}
			// Cut, and keep the broker unreachable a moment so redials fail
			// (and are logged) before one gets through.
			proxy.Refuse(true)
			proxy.Cut()
			testenv.Eventually(t, 10*time.Second, func() bool { return !b.Ready() }, "the cut was not noticed (round %d)", round)
			time.Sleep(300 * time.Millisecond)
			proxy.Refuse(false)
			if err := b.WaitReady(ctx); err != nil {
				t.Fatalf("no reconnect: %v", err)
			}
		}
		// A publish whose context ends while the broker is away.
		proxy.Refuse(true)
		proxy.Cut()
		testenv.Eventually(t, 10*time.Second, func() bool { return !b.Ready() }, "the cut was not noticed")
		short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		capture.err("publish while cut off", pub.Publish(short, q, mq.Message{Body: []byte("during cut")}))
		cancel()
		proxy.Refuse(false)
		if err := b.WaitReady(ctx); err != nil {
			t.Fatalf("no reconnect: %v", err)
		}
		capture.err("stop consumer", c.Stop(ctx))
		logs, _ := capture.logs()
		for _, ev := range []string{mq.EventConnectionLost, mq.EventConnectionRestored, "acemq.connection.dial.failed"} {
			if !strings.Contains(logs, "msg="+ev) {
				t.Errorf("no %s record was logged: the check would prove little", ev)
			}
		}
	})

	t.Run("refused credentials", func(t *testing.T) {
		for _, u := range []string{
			redactURL(t, user, wrong, ""),                  // the user exists, the password is wrong
			redactURL(t, "goit_redact_nobody", nobody, ""), // the user does not exist
		} {
			b := newBroker(u)
			ctx := testenv.Context(t, 30*time.Second)
			err := b.Start(ctx)
			closeBroker(b)
			if err == nil {
				t.Fatalf("Start with refused credentials succeeded")
			}
			if !errors.Is(err, mq.ErrAccessRefused) {
				t.Errorf("errors.Is(err, ErrAccessRefused) is false: %v", err)
			}
			capture.err("start with refused credentials", err)
		}
	})

	t.Run("unreachable and malformed URLs", func(t *testing.T) {
		closedPort := testenv.ClosedAddr(t)
		for _, u := range []string{
			redactURL(t, user, password, closedPort),                                    // nothing listens
			"ftp://" + user + ":" + url.PathEscape(password) + "@127.0.0.1/",            // not AMQP
			"amqp://" + user + ":" + password + "@127.0.0.1:notaport/",                  // does not parse
			"amqp://" + user + ":" + password + "@[::1/",                                // does not parse either
			redactURL(t, user, password, "") + "?certfile=" + url.QueryEscape(password), // a secret in the query
		} {
			b := newBroker(u)
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			err := b.Start(ctx)
			cancel()
			if err == nil {
				closeBroker(b)
				continue // the query URL may connect; its logs are checked all the same
			}
			closeBroker(b)
			capture.err("start with "+mq.Redact(u), err)
		}
	})

	// The check: no form of any password anywhere.
	logs, records := capture.logs()
	if records == 0 || !strings.Contains(logs, "xxxxx") {
		t.Errorf("captured %d log records, none with a redacted URL: the check would prove nothing", records)
	}
	capture.mu.Lock()
	errs := append([]string(nil), capture.errs...)
	capture.mu.Unlock()
	if len(errs) < 8 {
		t.Errorf("only %d errors were captured; want at least 8", len(errs))
	}
	spanText, nSpans := redactSpans(spans)
	if nSpans == 0 {
		t.Error("no span was recorded: the check would prove nothing")
	}
	metricText := redactMetrics(t, metrics)

	mask := func(text string) string { // what this test prints never shows a password either
		for _, secret := range secrets {
			for _, form := range redactForms(secret) {
				text = strings.ReplaceAll(text, form, "<PASSWORD>")
			}
		}
		return text
	}
	for _, e := range errs {
		t.Logf("checked error: %s", mask(e))
	}
	for what, secret := range secrets {
		// The check must see a password however a URL spells it.
		for _, probe := range []string{
			"url=" + redactURL(t, user, secret, ""),
			"error=" + url.UserPassword(user, secret).String(),
			"query=" + url.Values{"certfile": {secret}}.Encode(),
		} {
			if _, shows := redactShows(probe, secret); !shows {
				t.Fatalf("the check misses %s in a probe", what)
			}
		}
		for _, line := range strings.Split(logs, "\n") {
			if form, shows := redactShows(line, secret); shows {
				t.Errorf("a log record shows %s (as %s): %s", what, redactFormName(secret, form), mask(line))
			}
		}
		for _, e := range errs {
			if form, shows := redactShows(e, secret); shows {
				t.Errorf("an error shows %s (as %s): %s", what, redactFormName(secret, form), mask(e))
			}
		}
		for _, sp := range spanText {
			if form, shows := redactShows(sp, secret); shows {
				t.Errorf("a span shows %s (as %s): %s", what, redactFormName(secret, form), mask(sp))
			}
		}
		if _, shows := redactShows(metricText, secret); shows {
			t.Errorf("a metric attribute shows %s", what)
		}
	}
	t.Logf("checked %d log records, %d errors, %d spans and the metrics for %d passwords: none shows", records, len(errs), nSpans, len(secrets))
}

// redactSpans renders every recorded span (started or ended) as text: name,
// status, attributes, events with their attributes, links with theirs.
func redactSpans(r *tracetest.SpanRecorder) ([]string, int) {
	var out []string
	render := func(s sdktrace.ReadOnlySpan) {
		var b strings.Builder
		fmt.Fprintf(&b, "%s status=%v %q", s.Name(), s.Status().Code, s.Status().Description)
		for _, a := range s.Attributes() {
			fmt.Fprintf(&b, " %s=%s", a.Key, a.Value.String())
		}
		for _, e := range s.Events() {
			fmt.Fprintf(&b, " event %s", e.Name)
			for _, a := range e.Attributes {
				fmt.Fprintf(&b, " %s=%s", a.Key, a.Value.String())
			}
		}
		for _, l := range s.Links() {
			for _, a := range l.Attributes {
				fmt.Fprintf(&b, " link %s=%s", a.Key, a.Value.String())
			}
		}
		out = append(out, b.String())
	}
	ended := r.Ended()
	for _, s := range ended {
		render(s)
	}
	for _, s := range r.Started() {
		if rs, ok := s.(sdktrace.ReadOnlySpan); ok {
			render(rs)
		}
	}
	return out, len(ended)
}

// redactMetrics renders every data point's attributes of every metric as
// text.
func redactMetrics(t *testing.T, r *sdkmetric.ManualReader) string {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	set := func(name string, s attribute.Set) {
		fmt.Fprintf(&b, "%s{%s}\n", name, s.Encoded(attribute.DefaultEncoder()))
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					set(m.Name, p.Attributes)
				}
			case metricdata.Sum[float64]:
				for _, p := range d.DataPoints {
					set(m.Name, p.Attributes)
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					set(m.Name, p.Attributes)
				}
			case metricdata.Gauge[float64]:
				for _, p := range d.DataPoints {
					set(m.Name, p.Attributes)
				}
			case metricdata.Histogram[int64]:
				for _, p := range d.DataPoints {
					set(m.Name, p.Attributes)
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					set(m.Name, p.Attributes)
				}
			default:
				fmt.Fprintf(&b, "%s %+v\n", m.Name, d)
			}
		}
	}
	return b.String()
}
