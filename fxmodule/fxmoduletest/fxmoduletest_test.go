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
func (f *fatal) Fatalf(format string, a ...any) {
	f.msg = fmt.Sprintf(format, a...)
	panic(f)
}

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

// fatalOf runs f with a TB that records a Fatal instead of ending the
// test, and returns what it recorded ("" when f did not fail).
func fatalOf(t *testing.T, f func(testing.TB)) string {
	ft := &fatal{TB: t}
	func() {
		defer func() {
			if r := recover(); r != nil && r != any(ft) {
				panic(r)
			}
		}()
		f(ft)
	}()
	return ft.msg
}

// A consumer with Inbox set runs, given an inbox, as the app runs it: the
// inbox innermost, inside Standard's ladder (each attempt in an inbox of
// its own) and inside the shared middleware.
func TestConsumerWithInboxRunsTheInboxInnermost(t *testing.T) {
	var trail []string
	mark := func(name string) mq.Middleware {
		return func(next mq.Handler) mq.Handler {
			return mq.HandlerFunc(func(ctx context.Context, d *mq.Delivery) error {
				trail = append(trail, name)
				return next.Handle(ctx, d)
			})
		}
	}
	calls := 0
	def := fxmodule.Consumer{Queue: "shipping.orders", Standard: true, Inbox: true, Handler: mq.HandlerFunc(func(context.Context, *mq.Delivery) error {
		calls++
		trail = append(trail, "handler")
		if calls < 3 {
			return errors.New("carrier timeout")
		}
		return nil
	})}
	c := fxmoduletest.ConsumerWithInbox(t, mark("inbox"), def, ordersTopology(), mark("shared"))
	if r := c.Deliver(mq.Message{MessageId: "m-1"}); r.Outcome != mq.OutcomeAck || r.Attempts != 3 {
		t.Fatalf("result %v, want acknowledged on attempt 3", r)
	}
	if got := strings.Join(trail, " "); got != "shared inbox handler inbox handler inbox handler" {
		t.Fatalf("trail %q: the inbox sits innermost, one per attempt", got)
	}
}

// Consumer refuses a consumer with Inbox set, naming the way that runs
// it; ConsumerWithInbox refuses one without (the app would run it with no
// inbox: Inbox: true forgotten) and a nil inbox.
func TestConsumerInboxRefusals(t *testing.T) {
	h := mq.HandlerFunc(func(context.Context, *mq.Delivery) error { return nil })
	withInbox := fxmodule.Consumer{Queue: "shipping.orders", Standard: true, Inbox: true, Handler: h}
	if msg := fatalOf(t, func(tb testing.TB) { fxmoduletest.Consumer(tb, withInbox, ordersTopology()) }); !strings.Contains(msg, "fxmoduletest.ConsumerWithInbox") {
		t.Errorf("Consumer with Inbox set: fatal %q, want it to name fxmoduletest.ConsumerWithInbox", msg)
	}
	without := withInbox
	without.Inbox = false
	noop := func(next mq.Handler) mq.Handler { return next }
	if msg := fatalOf(t, func(tb testing.TB) { fxmoduletest.ConsumerWithInbox(tb, noop, without, ordersTopology()) }); !strings.Contains(msg, "Inbox is not set") {
		t.Errorf("ConsumerWithInbox without Inbox set: fatal %q", msg)
	}
	if msg := fatalOf(t, func(tb testing.TB) { fxmoduletest.ConsumerWithInbox(tb, nil, withInbox, ordersTopology()) }); !strings.Contains(msg, "inbox is nil") {
		t.Errorf("ConsumerWithInbox with a nil inbox: fatal %q", msg)
	}
}
