//go:build integration

package integration

// mqtest.Publisher, given the topology, answers exactly what the broker
// does (issue 24, item 2; issue 22, item 11): the same publishes on both,
// the outcomes compared.

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/internal/testenv"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/mqtest"
	"github.com/acemq/acemq-go/topology"
)

// outcomeOf names a publish's outcome the way the comparison needs it.
func outcomeOf(err error) string {
	var be *mq.BrokerError
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, mq.ErrUnroutable):
		return "unroutable: " + err.Error()
	case errors.Is(err, mq.ErrInvalid):
		return "invalid: " + err.Error()
	case errors.As(err, &be):
		return "refused " + strings.Fields(be.Reason)[0]
	}
	return "other: " + err.Error()
}

func TestFakePublisherAnswersAsTheBroker(t *testing.T) {
	testenv.NoLeaks(t)
	p := testenv.Name(t) + "."
	qa, qb, qc := p+"a", p+"b", p+"c"
	ex := func(s string) string { return p + s }
	topo := topology.New().
		Exchange(ex("direct"), topology.Direct, topology.AutoDelete()).
		Exchange(ex("topic"), topology.Topic, topology.AutoDelete()).
		Exchange(ex("fanout"), topology.Fanout, topology.AutoDelete()).
		Exchange(ex("headers"), topology.Headers, topology.AutoDelete()).
		Exchange(ex("with-ae"), topology.Direct, topology.AutoDelete(), topology.Args(map[string]any{"alternate-exchange": ex("fanout")})).
		Exchange(ex("internal"), topology.Fanout, topology.AutoDelete(), topology.Internal()).
		Queue(qa, topology.Classic()).
		Queue(qb, topology.Classic()).
		Queue(qc, topology.Classic()).
		Binding(qa, ex("direct"), "k").
		Binding(qa, ex("topic"), "order.*").
		Binding(qb, ex("topic"), "order.#").
		Binding(qc, ex("topic"), "#.audit").
		Binding(qc, ex("topic"), "*.*.eu").
		Binding(qa, ex("fanout"), "ignored").
		Binding(qb, ex("fanout"), "").
		Binding(qa, ex("headers"), "", topology.Args(map[string]any{"x-match": "all", "kind": "order", "v": int32(2)})).
		Binding(qb, ex("headers"), "", topology.Args(map[string]any{"x-match": "any", "kind": "refund", "urgent": nil})).
		Binding(qc, ex("headers"), "", topology.Args(map[string]any{"x-match": "all", "x-tenant": "t1"})).
		Binding(qc, ex("with-ae"), "k").
		Binding(qc, ex("internal"), "")
	testenv.Cleanup(t, qa, qb, qc)
	testenv.CleanupExchanges(t, ex("with-ae"), ex("direct"), ex("topic"), ex("fanout"), ex("headers"), ex("internal"))
	b := testenv.Broker(t, mq.Config{Logger: testenv.Discard()})
	ctx := testenv.Context(t, 90*time.Second)
	if err := b.Declare(ctx, topo); err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("x", 256)
	var deep any = "leaf"
	for range 32 + 1 {
		deep = amqp.Table{"n": deep}
	}
	type publish struct {
		exchange, key string
		m             mq.Message
		opts          []mq.PublisherOption
	}
	h := func(kv ...any) mq.Message {
		t := amqp.Table{}
		for i := 0; i < len(kv); i += 2 {
			t[kv[i].(string)] = kv[i+1]
		}
		return mq.Message{Headers: t}
	}
	allow := []mq.PublisherOption{mq.AllowUnroutable()}
	cases := []publish{
		{"", qa, mq.Message{}, nil},
		{"", p + "nobody", mq.Message{}, nil},
		{"", p + "nobody", mq.Message{}, allow},
		{ex("direct"), "k", mq.Message{}, nil},
		{ex("direct"), "K", mq.Message{}, nil},
		{ex("topic"), "order.placed", mq.Message{}, nil},
		{ex("topic"), "order", mq.Message{}, nil},
		{ex("topic"), "order.placed.eu", mq.Message{}, nil},
		{ex("topic"), "refund.audit", mq.Message{}, nil},
		{ex("topic"), "audit", mq.Message{}, nil},
		{ex("topic"), "order.audit", mq.Message{}, nil},
		{ex("topic"), "a..eu", mq.Message{}, nil},
		{ex("topic"), "a.eu", mq.Message{}, nil},
		{ex("topic"), "invoice", mq.Message{}, nil},
		{ex("topic"), "invoice", mq.Message{}, allow},
		{ex("topic"), "", mq.Message{}, nil},
		{ex("topic"), ".audit", mq.Message{}, nil},
		{ex("fanout"), "anything", mq.Message{}, nil},
		{ex("headers"), "", h("kind", "order", "v", int64(2)), nil},
		{ex("headers"), "", h("kind", "order", "v", int8(2)), nil},
		{ex("headers"), "", h("kind", "order", "v", "2"), nil},
		{ex("headers"), "", h("kind", "order"), nil},
		{ex("headers"), "", h("urgent", false), nil},
		{ex("headers"), "", h("kind", "refund", "v", int32(2)), nil},
		{ex("headers"), "", h("x-tenant", "t2"), nil},
		{ex("headers"), "", mq.Message{}, nil},
		{ex("with-ae"), "k", mq.Message{}, nil},
		{ex("with-ae"), "other", mq.Message{}, nil},
		{ex("nowhere"), "k", mq.Message{}, nil},
		{ex("internal"), "k", mq.Message{}, nil},
		{"amq.topic", "order.placed", mq.Message{}, nil},
		{"amq.topic", "order.placed", mq.Message{}, allow},
		// The validator's refusals.
		{ex("topic"), long, mq.Message{}, nil},
		{ex("topic"), "order.placed", mq.Message{MessageId: long}, nil},
		{ex("topic"), "order.placed", mq.Message{Expiration: "soon"}, nil},
		{ex("topic"), "order.placed", mq.Message{Headers: amqp.Table{"deep": deep}}, nil},
		{ex("topic"), "order.placed", mq.Message{Headers: amqp.Table{"count": uint64(1)}}, nil},
		{ex("topic"), "order.placed", mq.Message{Headers: amqp.Table{"big": strings.Repeat("h", 140_000)}}, nil},
	}
	queues := []string{qa, qb, qc}
	agreed := 0
	for _, c := range cases {
		pub := b.Publisher(c.exchange, c.opts...)
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		realErr := pub.Publish(pctx, c.key, c.m)
		cancel()
		pub.Close()
		var reached []string
		for _, q := range queues {
			if n := len(testenv.GetAll(t, b, q)); n > 0 {
				reached = append(reached, q)
			}
		}
		fake := &mqtest.Publisher{Topology: topo, Exchange: c.exchange, Options: c.opts}
		fakeErr := fake.Publish(ctx, c.key, c.m)
		var fakeReached []string
		if got := fake.Messages(); len(got) == 1 {
			fakeReached = got[0].Queues
		}
		slices.Sort(fakeReached)
		name := c.exchange + " " + c.key
		if len(name) > 80 {
			name = name[:80] + "…"
		}
		if ro, fo := outcomeOf(realErr), outcomeOf(fakeErr); ro != fo {
			t.Errorf("%s %v: the broker answered %q, the fake %q", name, c.m.Headers, ro, fo)
			continue
		}
		if !slices.Equal(reached, fakeReached) && !(len(reached) == 0 && len(fakeReached) == 0) {
			t.Errorf("%s %v: the broker routed to %v, the fake to %v", name, c.m.Headers, reached, fakeReached)
			continue
		}
		agreed++
	}
	t.Logf("%d of %d publishes answered alike by the broker and the fake", agreed, len(cases))
}
