package topology_test

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/acemq/acemq-go/retry"
	"github.com/acemq/acemq-go/topology"
)

// The contract example (docs/contract.md, "Topology and printout"): three calls, thirteen declarations.
func ExampleNew() {
	t := topology.New().
		Exchange("orders-events", topology.Topic).
		Queue("shipping.orders", topology.DeadLetter(), topology.Retry(retry.Exponential(6, 10*time.Second))).
		Binding("shipping.orders", "orders-events", "order.placed")
	fmt.Print(t)
	// Output:
	// Topology: 3 exchanges, 6 queues, 4 bindings
	//   declare exchange orders-events (topic, durable)
	//   declare exchange acemq.dlx (direct, durable)
	//   declare exchange acemq.retry (direct, durable)
	//   declare queue shipping.orders (durable, x-dead-letter-exchange='acemq.dlx', x-dead-letter-routing-key='shipping.orders.dlq', x-queue-type='quorum')
	//   declare queue shipping.orders.dlq (durable)
	//   declare queue shipping.orders.parked (durable)
	//   declare queue shipping.orders.retry.40s (durable, x-dead-letter-exchange='acemq.retry', x-dead-letter-routing-key='shipping.orders', x-message-ttl=40000)
	//   declare queue shipping.orders.retry.80s (durable, x-dead-letter-exchange='acemq.retry', x-dead-letter-routing-key='shipping.orders', x-message-ttl=80000)
	//   declare queue shipping.orders.retry.160s (durable, x-dead-letter-exchange='acemq.retry', x-dead-letter-routing-key='shipping.orders', x-message-ttl=160000)
	//   declare binding shipping.orders.dlq (from acemq.dlx on shipping.orders.dlq)
	//   declare binding shipping.orders.parked (from acemq.dlx on shipping.orders.parked)
	//   declare binding shipping.orders (from acemq.retry on shipping.orders)
	//   declare binding shipping.orders (from orders-events on order.placed)
}

// Mistakes are collected on the builder and returned together, each naming
// the call that made it.
func ExampleTopology_Validate() {
	err := topology.New().
		Queue("sessions", topology.Quorum(), topology.Exclusive()).
		Binding("billing.orders", "orders-events", "order.placed").
		Validate()
	fmt.Println(errors.Is(err, topology.ErrInvalid))
	fmt.Println(err)
	// Output:
	// true
	// topology: Queue("sessions", Quorum(), Exclusive()): a quorum queue cannot be exclusive, auto-delete or transient
	// topology: Binding("billing.orders", "orders-events", "order.placed"): queue "billing.orders" is not declared by this topology
	// topology: Binding("billing.orders", "orders-events", "order.placed"): exchange "orders-events" is not declared by this topology
}

// A plan is the printout as values, to log or to assert on.
func ExampleTopology_Plan() {
	plan, err := topology.New().
		Exchange("audit", topology.Fanout).
		Queue("audit.log", topology.Classic()).
		Binding("audit.log", "audit", "").
		Plan()
	if err != nil {
		panic(err)
	}
	for _, a := range plan {
		fmt.Printf("%s | %s | %s\n", a.Kind, a.Name, a.Detail)
	}
	// Output:
	// exchange | audit | fanout, durable
	// queue | audit.log | durable
	// binding | audit.log | from audit on ''
}

// A consumer declares the failure half of its queue for itself, never the
// queue.
func ExampleForConsumer() {
	fmt.Print(topology.ForConsumer("shipping.orders", retry.Exponential(4, 20*time.Second)))
	// Output:
	// Topology: 2 exchanges, 4 queues, 3 bindings
	//   declare exchange acemq.dlx (direct, durable)
	//   declare exchange acemq.retry (direct, durable)
	//   declare queue shipping.orders.dlq (durable)
	//   declare queue shipping.orders.parked (durable)
	//   declare queue shipping.orders.retry.40s (durable, x-dead-letter-exchange='acemq.retry', x-dead-letter-routing-key='shipping.orders', x-message-ttl=40000)
	//   declare queue shipping.orders.retry.80s (durable, x-dead-letter-exchange='acemq.retry', x-dead-letter-routing-key='shipping.orders', x-message-ttl=80000)
	//   declare binding shipping.orders.dlq (from acemq.dlx on shipping.orders.dlq)
	//   declare binding shipping.orders.parked (from acemq.dlx on shipping.orders.parked)
	//   declare binding shipping.orders (from acemq.retry on shipping.orders)
}

// Fragments from several modules make one topology.
func ExampleTopology_Merge() {
	events := topology.New().Exchange("orders-events")
	shipping := topology.New().
		Queue("shipping.orders", topology.Classic()).
		Binding("shipping.orders", "orders-events", "order.placed")
	fmt.Print(topology.New().Merge(events, shipping, events))
	// Output:
	// Topology: 1 exchanges, 1 queues, 1 bindings
	//   declare exchange orders-events (topic, durable)
	//   declare queue shipping.orders (durable)
	//   declare binding shipping.orders (from orders-events on order.placed)
}

func ExampleShort() {
	for _, d := range []time.Duration{30 * time.Second, 90 * time.Second, 2 * time.Minute, 90 * time.Minute, 2 * time.Hour, 1500 * time.Millisecond} {
		fmt.Println(d, "→", topology.Short(d), topology.RungQueue("orders.new", d))
	}
	// Output:
	// 30s → 30s orders.new.retry.30s
	// 1m30s → 90s orders.new.retry.90s
	// 2m0s → 2m orders.new.retry.2m
	// 1h30m0s → 90m orders.new.retry.90m
	// 2h0m0s → 2h orders.new.retry.2h
	// 1.5s → 1s orders.new.retry.1s
}

// A queue of this instance's own, bound to a fanout exchange: every
// instance of the service hears every message.
func ExampleInstanceQueue() {
	q := topology.InstanceQueue("billing.prices")
	t := topology.New().
		Exchange("prices", topology.Fanout).
		Queue(q, topology.Exclusive()).
		Binding(q, "prices", "")
	fmt.Println(t.Validate() == nil, strings.HasPrefix(q, "billing.prices."))
	// Output: true true
}
