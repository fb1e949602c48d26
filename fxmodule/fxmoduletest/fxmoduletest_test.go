package fxmoduletest_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq-go/fxmodule"
	"github.com/acemq/acemq-go/fxmodule/fxmoduletest"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/retry"
	"github.com/acemq/acemq-go/topology"
)

func ordersTopology() *topology.Topology {
	return topology.New().
		Exchange("orders-events", topology.Topic).
		Exchange("commands", topology.Direct).
		Queue("shipping.orders", topology.DeadLetter(), topology.Retry(retry.Exponential(3, 10*time.Second))).
		Binding("shipping.orders", "orders-events", "order.placed").
		Binding("shipping.orders", "commands", "ship")
}

// The consumer the app defines runs through the chain the module builds:
// Standard with the topology's policy (three attempts, waits 10 s and 20 s
// in-process, then .dlq), the shared middleware outside it.
func TestConsumerRunsTheModulesChain(t *testing.T) {
	var trail []string
	shared := func(next mq.Handler) mq.Handler {
		return mq.HandlerFunc(func(ctx context.Context, d *mq.Delivery) error {
			trail = append(trail, "shared")
			return next.Handle(ctx, d)
		})
	}
	def := fxmodule.Consumer{Queue: "shipping.orders", Standard: true, Handler: mq.HandlerFunc(func(context.Context, *mq.Delivery) error {
		trail = append(trail, "handler")
		return errors.New("carrier timeout")
	})}
	c := fxmoduletest.Consumer(t, def, ordersTopology(), shared)
	r := c.Deliver(mq.Message{Body: []byte(`{"id":"o-1"}`)})
	if r.Outcome != mq.OutcomeDeadLetter || r.Attempts != 3 || !slices.Equal(r.Waits, []time.Duration{10 * time.Second, 20 * time.Second}) ||
		r.Hops[0].Queue != "shipping.orders.dlq" {
		t.Fatalf("result %v, waits %v", r, r.Waits)
	}
	if got := strings.Join(trail, " "); got != "shared handler handler handler" {
		t.Fatalf("trail %q: the shared middleware sits outside the retries", got)
	}
}

// fatal records a Fatal instead of ending the test.
type fatal struct {
	testing.TB
	msg string
}

func (f *fatal) Helper()        {}
func (f *fatal) Fatal(a ...any) { f.msg = fmt.Sprint(a...); panic(f) }

// A consumer the module would refuse fails the test with the module's
// error.
func TestConsumerTheModuleWouldRefuse(t *testing.T) {
	f := &fatal{TB: t}
	func() {
		defer func() {
			if r := recover(); r != nil && r != any(f) {
				panic(r)
			}
		}()
		fxmoduletest.Consumer(f, fxmodule.Consumer{Queue: "billing.orders", Standard: true, Handler: mq.HandlerFunc(func(context.Context, *mq.Delivery) error { return nil })}, ordersTopology())
	}()
	if !strings.Contains(f.msg, `declares no topology.Retry for queue "billing.orders"`) {
		t.Fatalf("fatal %q, want the module's refusal", f.msg)
	}
}

// The fake publisher is what AsPublisher would build: an event publisher
// to a topic exchange, a command publisher (mandatory) to a direct one and
// to the default exchange; mq.Mandatory() after the default wins.
func TestPublisherIsTheModulesPublisher(t *testing.T) {
	ctx := context.Background()
	topo := ordersTopology()
	for _, c := range []struct {
		exchange, key string
		opts          []mq.PublisherOption
		unroutable    bool
	}{
		{"orders-events", "order.shipped", nil, false},
		{"orders-events", "order.shipped", []mq.PublisherOption{mq.Mandatory()}, true},
		{"commands", "cancel", nil, true},
		{"", "nobody", nil, true},
		{"", "shipping.orders", nil, false},
	} {
		err := fxmoduletest.Publisher(topo, c.exchange, c.opts...).Publish(ctx, c.key, mq.Message{})
		if errors.Is(err, mq.ErrUnroutable) != c.unroutable || err != nil && !c.unroutable {
			t.Errorf("publish to %q with key %q: %v, want unroutable %v", c.exchange, c.key, err, c.unroutable)
		}
	}
}
