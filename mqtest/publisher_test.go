package mqtest_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/mqtest"
	"github.com/acemq/acemq-go/topology"
)

// invalidPublishes are inputs the runtime's validator refuses before
// anything reaches the wire (issue 22, item 11: the fake took all of them).
func invalidPublishes() []struct {
	name, key string
	m         mq.Message
} {
	long := strings.Repeat("x", 256)
	var deep any = "leaf"
	for range 32 + 1 {
		deep = amqp.Table{"n": deep}
	}
	return []struct {
		name, key string
		m         mq.Message
	}{
		{"routing key over 255 bytes", long, mq.Message{}},
		{"message id over 255 bytes", "q", mq.Message{MessageId: long}},
		{"expiration not a number", "q", mq.Message{Expiration: "soon"}},
		{"headers nested too deep", "q", mq.Message{Headers: amqp.Table{"deep": deep}}},
		{"a header AMQP cannot carry", "q", mq.Message{Headers: amqp.Table{"count": uint64(1)}}},
		{"a header key over 255 bytes", "q", mq.Message{Headers: amqp.Table{long: "v"}}},
	}
}

// The fake refuses what the runtime refuses, with the runtime's own error
// (an mq.Publisher of a broker never started validates before it would
// connect), and records none of it.
func TestPublisherValidatesAsTheRuntime(t *testing.T) {
	b := mq.New(mq.Config{URLs: []string{"amqp://guest:guest@127.0.0.1:1/"}, Logger: slogDiscard()})
	defer b.Close(context.Background())
	real := b.Publisher("")
	var fake mqtest.Publisher
	for _, c := range invalidPublishes() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		want := real.Publish(ctx, c.key, c.m)
		cancel()
		got := fake.Publish(context.Background(), c.key, c.m)
		if !errors.Is(want, mq.ErrInvalid) {
			t.Fatalf("%s: the runtime answered %v; the test expects it to refuse", c.name, want)
		}
		if !errors.Is(got, mq.ErrInvalid) || got.Error() != want.Error() {
			t.Errorf("%s: the fake answered %v, the runtime %v", c.name, got, want)
		}
	}
	if n := len(fake.Messages()); n != 0 {
		t.Errorf("the fake recorded %d invalid publishes", n)
	}
}

// routingTopology has one exchange of every kind, an alternate exchange
// and an internal one.
func routingTopology() *topology.Topology {
	return topology.New().
		Exchange("direct", topology.Direct).
		Exchange("topic", topology.Topic).
		Exchange("fanout", topology.Fanout).
		Exchange("headers", topology.Headers).
		Exchange("with-ae", topology.Direct, topology.Args(map[string]any{"alternate-exchange": "fanout"})).
		Exchange("internal", topology.Fanout, topology.Internal()).
		Queue("a", topology.Classic()).
		Queue("b", topology.Classic()).
		Queue("c", topology.Classic()).
		Binding("a", "direct", "k").
		Binding("a", "topic", "order.*").
		Binding("b", "topic", "order.#").
		Binding("c", "topic", "#.audit").
		Binding("a", "fanout", "ignored").
		Binding("b", "fanout", "").
		Binding("a", "headers", "", topology.Args(map[string]any{"x-match": "all", "kind": "order", "v": int32(2)})).
		Binding("b", "headers", "", topology.Args(map[string]any{"x-match": "any", "kind": "refund", "urgent": nil})).
		Binding("c", "with-ae", "k").
		Binding("c", "internal", "")
}

func TestPublisherRoutesThroughTheTopology(t *testing.T) {
	for _, c := range []struct {
		exchange, key string
		headers       amqp.Table
		want          []string // nil: unroutable
	}{
		{"", "a", nil, []string{"a"}},
		{"", "nobody", nil, nil},
		{"direct", "k", nil, []string{"a"}},
		{"direct", "K", nil, nil},
		{"topic", "order.placed", nil, []string{"a", "b"}},
		{"topic", "order", nil, []string{"b"}},
		{"topic", "order.placed.eu", nil, []string{"b"}},
		{"topic", "refund.audit", nil, []string{"c"}},
		{"topic", "audit", nil, []string{"c"}},
		{"topic", "order.audit", nil, []string{"a", "b", "c"}},
		{"topic", "invoice", nil, nil},
		{"topic", "", nil, nil},
		{"fanout", "anything", nil, []string{"a", "b"}},
		{"headers", "", amqp.Table{"kind": "order", "v": int64(2)}, []string{"a"}},
		{"headers", "", amqp.Table{"kind": "order", "v": "2"}, nil},
		{"headers", "", amqp.Table{"kind": "order"}, nil},
		{"headers", "", amqp.Table{"urgent": false}, []string{"b"}},
		{"headers", "", amqp.Table{"kind": "refund", "v": int32(2)}, []string{"b"}},
		{"with-ae", "k", nil, []string{"c"}},
		{"with-ae", "other", nil, []string{"a", "b"}},
		{"amq.topic", "order.placed", nil, nil},
	} {
		p := &mqtest.Publisher{Topology: routingTopology(), Exchange: c.exchange}
		err := p.Publish(context.Background(), c.key, mq.Message{Headers: c.headers})
		if c.want == nil {
			if !errors.Is(err, mq.ErrUnroutable) || len(p.Messages()) != 0 {
				t.Errorf("%s %q %v: %v, recorded %d; want unroutable, nothing recorded", c.exchange, c.key, c.headers, err, len(p.Messages()))
			}
			continue
		}
		if err != nil {
			t.Errorf("%s %q %v: %v, want routed to %v", c.exchange, c.key, c.headers, err, c.want)
			continue
		}
		if got := p.Messages()[0].Queues; !slices.Equal(got, c.want) {
			t.Errorf("%s %q %v: routed to %v, want %v", c.exchange, c.key, c.headers, got, c.want)
		}
	}
}

func TestPublisherRefusesAsTheBroker(t *testing.T) {
	for _, c := range []struct {
		exchange string
		code     int
		is       error
	}{
		{"nowhere", 404, mq.ErrNotFound},
		{"internal", 403, mq.ErrAccessRefused},
	} {
		p := &mqtest.Publisher{Topology: routingTopology(), Exchange: c.exchange}
		err := p.Publish(context.Background(), "k", mq.Message{})
		var be *mq.BrokerError
		if !errors.As(err, &be) || be.Code != c.code || !errors.Is(err, c.is) {
			t.Errorf("publish to %s: %v, want a %d", c.exchange, err, c.code)
		}
	}
}

// AllowUnroutable, as on a real publisher: taken, recorded with no queue.
func TestPublisherAllowUnroutable(t *testing.T) {
	p := &mqtest.Publisher{Topology: routingTopology(), Exchange: "topic", Options: []mq.PublisherOption{mq.AllowUnroutable()}}
	if err := p.Publish(context.Background(), "invoice", mq.Message{}); err != nil {
		t.Fatal(err)
	}
	if got := p.Messages(); len(got) != 1 || got[0].Queues == nil || len(got[0].Queues) != 0 {
		t.Fatalf("recorded %+v, want one with no queues", got)
	}
	p.Options = append(p.Options, mq.Mandatory())
	if err := p.Publish(context.Background(), "invoice", mq.Message{}); !errors.Is(err, mq.ErrUnroutable) {
		t.Fatalf("Mandatory after AllowUnroutable: %v, want unroutable", err)
	}
}

func slogDiscard() *slog.Logger { return slog.New(slog.DiscardHandler) }
