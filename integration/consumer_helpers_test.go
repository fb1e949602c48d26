//go:build integration

package integration

// Helpers of the consumer and middleware suite (consumer_*_test.go,
// bench_consume_test.go). Their names start with cons so they do not
// collide with the other suites' helpers in this package.

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/internal/tcpproxy"
	"github.com/acemq/acemq-go/internal/testenv"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/retry"
	"github.com/acemq/acemq-go/topology"
)

// consRecord is one log record as consLog kept it: its attributes (those
// added with Logger.With included) flattened to strings.
type consRecord struct {
	at    time.Time
	level slog.Level
	msg   string
	attrs map[string]string
}

func (r consRecord) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", r.level, r.msg)
	for k, v := range r.attrs {
		fmt.Fprintf(&b, " %s=%q", k, v)
	}
	return b.String()
}

// consLog is a slog.Handler that keeps every record, so a test can assert
// on the contract's events, and passes records at info and above to the
// test log.
type consLog struct {
	store *consStore
	pre   []slog.Attr
	out   slog.Handler
}

type consStore struct {
	mu      sync.Mutex
	records []consRecord
}

func newConsLog(t testing.TB) *consLog {
	return &consLog{store: &consStore{}, out: testenv.Logger(t).Handler()}
}

func (h *consLog) Enabled(context.Context, slog.Level) bool { return true }

func (h *consLog) Handle(ctx context.Context, r slog.Record) error {
	rec := consRecord{at: r.Time, level: r.Level, msg: r.Message, attrs: map[string]string{}}
	for _, a := range h.pre {
		rec.attrs[a.Key] = a.Value.String()
	}
	r.Attrs(func(a slog.Attr) bool {
		rec.attrs[a.Key] = a.Value.String()
		return true
	})
	h.store.mu.Lock()
	h.store.records = append(h.store.records, rec)
	h.store.mu.Unlock()
	if r.Level >= slog.LevelInfo && h.out != nil {
		return h.out.WithAttrs(h.pre).Handle(ctx, r)
	}
	return nil
}

func (h *consLog) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.pre = append(append([]slog.Attr(nil), h.pre...), as...)
	return &c
}

func (h *consLog) WithGroup(string) slog.Handler { return h }

// logger returns a logger writing to h.
func (h *consLog) logger() *slog.Logger { return slog.New(h) }

// all returns the records whose message is msg ("" for all of them).
func (h *consLog) all(msg string) []consRecord {
	h.store.mu.Lock()
	defer h.store.mu.Unlock()
	var out []consRecord
	for _, r := range h.store.records {
		if msg == "" || r.msg == msg {
			out = append(out, r)
		}
	}
	return out
}

func (h *consLog) count(msg string) int { return len(h.all(msg)) }

// containing returns the records any attribute or message of which
// contains s.
func (h *consLog) containing(s string) []consRecord {
	var out []consRecord
	for _, r := range h.all("") {
		hit := strings.Contains(r.msg, s)
		for _, v := range r.attrs {
			hit = hit || strings.Contains(v, s)
		}
		if hit {
			out = append(out, r)
		}
	}
	return out
}

// consBroker starts a broker for the test whose log goes to a consLog.
func consBroker(t testing.TB, urls ...string) (*mq.Broker, *consLog) {
	t.Helper()
	lg := newConsLog(t)
	return testenv.Broker(t, mq.Config{URLs: urls, Logger: lg.logger(), Heartbeat: 2 * time.Second}), lg
}

// consProxyURL starts a TCP proxy in front of the test broker (closed when
// the test ends) and returns it with the AMQP URL through it.
func consProxyURL(t testing.TB) (*tcpproxy.Proxy, string) {
	t.Helper()
	u, err := url.Parse(testenv.URL())
	if err != nil {
		t.Fatalf("AMQP_URL: %v", err)
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), "5672")
	}
	p, err := tcpproxy.Start(host)
	if err != nil {
		t.Fatalf("start proxy: %v", err)
	}
	t.Cleanup(p.Close)
	u.Host = p.Addr()
	return p, u.String()
}

// consQueue names a goit.* queue, declares it (quorum unless opts say
// otherwise) and deletes it, with every queue derived from it for p
// (.dlq, .parked and p's rungs), when the test ends.
func consQueue(t testing.TB, b *mq.Broker, p retry.Policy, opts ...topology.QueueOption) string {
	t.Helper()
	q := testenv.Name(t)
	consCleanup(t, q, p)
	if err := b.Declare(testenv.Context(t, 10*time.Second), topology.New().Queue(q, opts...)); err != nil {
		t.Fatalf("declare %s: %v", q, err)
	}
	return q
}

// consCleanup deletes q and the queues derived from it for p when the test
// ends.
func consCleanup(t testing.TB, q string, p retry.Policy) {
	qs := []string{q, topology.DeadLetterQueue(q), topology.ParkedQueue(q)}
	for _, r := range p.BrokerRungs() {
		qs = append(qs, topology.RetryQueue(q, r))
	}
	testenv.Cleanup(t, qs...)
}

// consPublish publishes msgs to q through the default exchange, confirmed.
func consPublish(t testing.TB, b *mq.Broker, q string, msgs ...mq.Message) {
	t.Helper()
	p := b.Publisher("")
	defer p.Close()
	if err := p.PublishBatch(testenv.Context(t, 30*time.Second), q, msgs); err != nil {
		t.Fatalf("publish to %s: %v", q, err)
	}
}

// consMessages makes n small messages with ids prefix-0 … prefix-(n-1).
func consMessages(prefix string, n int) []mq.Message {
	msgs := make([]mq.Message, n)
	for i := range msgs {
		msgs[i] = mq.Message{Body: []byte(fmt.Sprintf(`{"n":%d}`, i)), MessageID: fmt.Sprintf("%s-%d", prefix, i), ContentType: "application/json"}
	}
	return msgs
}

// consCount is MessageCount or a failed test.
func consCount(t testing.TB, b *mq.Broker, q string) int {
	t.Helper()
	n, err := b.MessageCount(testenv.Context(t, 10*time.Second), q)
	if err != nil {
		t.Fatalf("count %s: %v", q, err)
	}
	return n
}

// consGetAll takes every message ready in q (basic.get, acknowledged) on a
// channel of its own.
func consGetAll(t testing.TB, b *mq.Broker, q string) []amqp.Delivery {
	t.Helper()
	ch, err := b.Channel(testenv.Context(t, 10*time.Second))
	if err != nil {
		t.Fatalf("channel: %v", err)
	}
	defer ch.Close()
	var out []amqp.Delivery
	for {
		d, ok, err := ch.Get(q, true)
		if err != nil {
			t.Fatalf("get from %s: %v", q, err)
		}
		if !ok {
			return out
		}
		out = append(out, d)
	}
}

// consStop stops c within 20 s or fails the test.
func consStop(t testing.TB, c *mq.Consumer) {
	t.Helper()
	if err := c.Stop(testenv.Context(t, 20*time.Second)); err != nil {
		t.Errorf("stop consumer: %v", err)
	}
}

// consCalls records a handler's calls.
type consCalls struct {
	mu       sync.Mutex
	at       []time.Time
	attempts []int
	ids      map[string]int
}

func (c *consCalls) add(d *mq.Delivery) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.at = append(c.at, time.Now())
	c.attempts = append(c.attempts, d.Attempt())
	if c.ids == nil {
		c.ids = map[string]int{}
	}
	c.ids[d.MessageId]++
	return len(c.at)
}

func (c *consCalls) n() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.at)
}

func (c *consCalls) snapshot() ([]time.Time, []int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Time(nil), c.at...), append([]int(nil), c.attempts...)
}

// consSettledCount waits until q holds want ready messages: a requeue (a
// nack, or a channel's close) reaches a quorum queue's count a moment after
// the client sent it. It fails the test if q does not get there in 5 s.
func consSettledCount(t testing.TB, b *mq.Broker, q string, want int) {
	t.Helper()
	var n int
	testenv.Eventually(t, 5*time.Second, func() bool { n = consCount(t, b, q); return n == want }, "%s to hold %d messages; it holds %d", q, want, n)
}
