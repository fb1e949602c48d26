package middleware

import (
	"context"
	"log/slog"
	"reflect"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/mqtest"
)

// hop is one Forward a test delivery made.
type hop struct {
	queue string
	kind  mq.Outcome
	m     mq.Message
}

// world is the outside a test delivery sees: its forwards, events and log
// records. fail decides what a forward to a queue returns.
type world struct {
	mu     sync.Mutex
	hops   []hop
	events []mq.Event
	logs   *logRecorder
	logger *slog.Logger // the deliveries' logger; nil: one writing to logs
	fail   func(queue string) error
}

func newWorld() *world { return &world{logs: &logRecorder{}} }

func (w *world) delivery(queue string, raw amqp.Delivery) *mq.Delivery {
	l := w.logger
	if l == nil {
		l = slog.New(w.logs)
	}
	return mqtest.NewDelivery(queue, raw,
		mqtest.OnHop(func(_ context.Context, q string, k mq.Outcome, m mq.Message) error {
			w.mu.Lock()
			defer w.mu.Unlock()
			w.hops = append(w.hops, hop{q, k, m})
			if w.fail != nil {
				return w.fail(q)
			}
			return nil
		}),
		mqtest.OnEvent(func(_ context.Context, e mq.Event) {
			w.mu.Lock()
			defer w.mu.Unlock()
			w.events = append(w.events, e)
		}),
		mqtest.Logger(l),
	)
}

func (w *world) eventNames() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, e := range w.events {
		out = append(out, e.Name)
	}
	return out
}

// logRecorder is a slog.Handler keeping every record.
type logRecorder struct {
	mu      sync.Mutex
	records []slog.Record
	level   slog.Level
}

func (r *logRecorder) Enabled(_ context.Context, l slog.Level) bool { return l >= r.level }
func (r *logRecorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.records = append(r.records, rec.Clone())
	return nil
}
func (r *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *logRecorder) WithGroup(string) slog.Handler      { return r }

func (r *logRecorder) find(msg string) (slog.Record, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rec := range r.records {
		if rec.Message == msg {
			return rec, true
		}
	}
	return slog.Record{}, false
}

func (r *logRecorder) all() []slog.Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]slog.Record(nil), r.records...)
}

func attrs(rec slog.Record) map[string]slog.Value {
	m := map[string]slog.Value{}
	rec.Attrs(func(a slog.Attr) bool {
		m[a.Key] = a.Value
		return true
	})
	return m
}

// script is a handler that fails or succeeds call by call and records the
// attempt number of each call.
type script struct {
	mu       sync.Mutex
	attempts []int
	results  []error // results[i] is call i's result; past the end, the last one
	panics   map[int]any
}

func (s *script) Handle(_ context.Context, d *mq.Delivery) error {
	s.mu.Lock()
	i := len(s.attempts)
	s.attempts = append(s.attempts, d.Attempt())
	p, doPanic := s.panics[i]
	s.mu.Unlock()
	if doPanic {
		panic(p)
	}
	if len(s.results) == 0 {
		return nil
	}
	return s.results[min(i, len(s.results)-1)]
}

func (s *script) calls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.attempts)
}

// sample is a delivery with every property set, to check hops leave them
// alone.
func sample(headers amqp.Table) amqp.Delivery {
	return amqp.Delivery{
		Body:            []byte(`{"order":42}`),
		ContentType:     "application/json",
		ContentEncoding: "utf-8",
		DeliveryMode:    amqp.Persistent,
		Priority:        3,
		CorrelationId:   "corr-1",
		ReplyTo:         "replies",
		MessageId:       "msg-1",
		Timestamp:       time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC),
		Type:            "order.placed",
		AppId:           "shop",
		Headers:         headers,
		RoutingKey:      "orders",
		DeliveryTag:     7,
	}
}

// sameProperties fails t if m is not d's body and properties.
func sameProperties(t *testing.T, d amqp.Delivery, m mq.Message) {
	t.Helper()
	if string(m.Body) != string(d.Body) || m.ContentType != d.ContentType || m.ContentEncoding != d.ContentEncoding ||
		m.DeliveryMode != d.DeliveryMode || m.Priority != d.Priority || m.CorrelationId != d.CorrelationId ||
		m.ReplyTo != d.ReplyTo || m.MessageId != d.MessageId || !m.Timestamp.Equal(d.Timestamp) ||
		m.Type != d.Type || m.AppId != d.AppId || m.Expiration != d.Expiration || m.UserId != d.UserId {
		t.Errorf("the hop changed the message:\n got %+v\nfrom %+v", m, d)
	}
	for k, v := range d.Headers {
		if k == mq.HeaderAttempt || k == mq.HeaderSourceQueue {
			continue
		}
		if !reflect.DeepEqual(m.Headers[k], v) {
			t.Errorf("header %s = %v, want %v", k, m.Headers[k], v)
		}
	}
}
