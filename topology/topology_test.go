package topology_test

import (
	"errors"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/retry"
	"github.com/acemq/acemq-go/topology"
)

// contractPrintout is contract §4's printout, byte for byte. The same text
// is in testdata/contract.golden; every AceMQ library prints it.
const contractPrintout = `Topology: 3 exchanges, 6 queues, 4 bindings
  declare exchange orders-events (topic, durable)
  declare exchange acemq.dlx (direct, durable)
  declare exchange acemq.retry (direct, durable)
  declare queue shipping.orders (durable, x-dead-letter-exchange='acemq.dlx', x-dead-letter-routing-key='shipping.orders.dlq', x-queue-type='quorum')
  declare queue shipping.orders.dlq (durable)
  declare queue shipping.orders.parked (durable)
  declare queue shipping.orders.retry.40s (durable, x-dead-letter-exchange='acemq.retry', x-dead-letter-routing-key='shipping.orders', x-message-ttl=40000)
  declare queue shipping.orders.retry.80s (durable, x-dead-letter-exchange='acemq.retry', x-dead-letter-routing-key='shipping.orders', x-message-ttl=80000)
  declare queue shipping.orders.retry.160s (durable, x-dead-letter-exchange='acemq.retry', x-dead-letter-routing-key='shipping.orders', x-message-ttl=160000)
  declare binding shipping.orders.dlq (from acemq.dlx on shipping.orders.dlq)
  declare binding shipping.orders.parked (from acemq.dlx on shipping.orders.parked)
  declare binding shipping.orders (from acemq.retry on shipping.orders)
  declare binding shipping.orders (from orders-events on order.placed)
`

// contractTopology is contract §4's topology.
func contractTopology() *topology.Topology {
	return topology.New().
		Exchange("orders-events", topology.Topic).
		Queue("shipping.orders", topology.DeadLetter(), topology.Retry(retry.Exponential(6, 10*time.Second))).
		Binding("shipping.orders", "orders-events", "order.placed")
}

func TestContractPrintout(t *testing.T) {
	golden, err := os.ReadFile("testdata/contract.golden")
	if err != nil {
		t.Fatal(err)
	}
	if string(golden) != contractPrintout {
		t.Fatalf("testdata/contract.golden and the literal in this test disagree:\n%q\n%q", golden, contractPrintout)
	}
	tp := contractTopology()
	if err := tp.Validate(); err != nil {
		t.Fatalf("Validate() = %v", err)
	}
	if got := tp.String(); got != contractPrintout {
		t.Errorf("String() =\n%s\nwant\n%s", got, contractPrintout)
		gl, wl := strings.Split(got, "\n"), strings.Split(contractPrintout, "\n")
		for i := range min(len(gl), len(wl)) {
			if gl[i] != wl[i] {
				t.Errorf("first difference on line %d:\n got %q\nwant %q", i+1, gl[i], wl[i])
				break
			}
		}
	}
}

// TestContractPrintoutWhateverTheOrder writes §4's topology in every order
// of its three calls: the same lines, exchanges before queues before
// bindings; within a group the order the topology met the items.
func TestContractPrintoutWhateverTheOrder(t *testing.T) {
	calls := []func(*topology.Topology){
		func(tp *topology.Topology) { tp.Exchange("orders-events") },
		func(tp *topology.Topology) {
			tp.Queue("shipping.orders", topology.DeadLetter(), topology.Retry(retry.Exponential(6, 10*time.Second)))
		},
		func(tp *topology.Topology) { tp.Binding("shipping.orders", "orders-events", "order.placed") },
	}
	wantLines := strings.Split(contractPrintout, "\n")
	slices.Sort(wantLines)
	for _, order := range [][]int{{0, 1, 2}, {0, 2, 1}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}} {
		tp := topology.New()
		for _, i := range order {
			calls[i](tp)
		}
		plan, err := tp.Plan()
		if err != nil {
			t.Fatalf("order %v: Plan() = %v", order, err)
		}
		checkGroups(t, plan)
		got := tp.String()
		gotLines := strings.Split(got, "\n")
		slices.Sort(gotLines)
		if !slices.Equal(gotLines, wantLines) {
			t.Errorf("order %v: String() =\n%s", order, got)
		}
		// The exchange written first is declared first; the derived ones
		// come when the queue is met.
		exFirst := slices.Index(order, 0) < slices.Index(order, 1)
		if (plan[0].Name == "orders-events") != exFirst {
			t.Errorf("order %v: first exchange %s", order, plan[0].Name)
		}
		// The source's own binding follows the derived ones only if it was
		// written after the queue.
		bindLast := slices.Index(order, 1) < slices.Index(order, 2)
		if (plan[len(plan)-1].Detail == "from orders-events on order.placed") != bindLast {
			t.Errorf("order %v: last binding %v", order, plan[len(plan)-1])
		}
		if order[0] == 0 && order[1] == 1 {
			if got != contractPrintout {
				t.Errorf("order %v: String() =\n%s", order, got)
			}
		}
	}
}

func checkGroups(t *testing.T, plan []topology.Action) {
	t.Helper()
	rank := map[topology.ActionKind]int{topology.DeclareExchange: 0, topology.DeclareQueue: 1, topology.DeclareBinding: 2}
	for i := 1; i < len(plan); i++ {
		if rank[plan[i-1].Kind] > rank[plan[i].Kind] {
			t.Errorf("plan is not exchanges, queues, bindings: %v before %v", plan[i-1], plan[i])
		}
	}
}

func TestPlan(t *testing.T) {
	tp := contractTopology()
	plan, err := tp.Plan()
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(contractPrintout, "\n"), "\n")[1:]
	if len(plan) != len(lines) {
		t.Fatalf("Plan() has %d actions, the printout %d lines", len(plan), len(lines))
	}
	for i, a := range plan {
		if got := "  " + a.String(); got != lines[i] {
			t.Errorf("action %d: %q, want %q", i, got, lines[i])
		}
	}
	want := []topology.Action{
		{Kind: topology.DeclareExchange, Name: "orders-events", Detail: "topic, durable"},
		{Kind: topology.DeclareExchange, Name: "acemq.dlx", Detail: "direct, durable"},
		{Kind: topology.DeclareExchange, Name: "acemq.retry", Detail: "direct, durable"},
		{Kind: topology.DeclareQueue, Name: "shipping.orders", Detail: "durable, x-dead-letter-exchange='acemq.dlx', x-dead-letter-routing-key='shipping.orders.dlq', x-queue-type='quorum'"},
		{Kind: topology.DeclareQueue, Name: "shipping.orders.dlq", Detail: "durable"},
		{Kind: topology.DeclareQueue, Name: "shipping.orders.parked", Detail: "durable"},
		{Kind: topology.DeclareQueue, Name: "shipping.orders.retry.40s", Detail: "durable, x-dead-letter-exchange='acemq.retry', x-dead-letter-routing-key='shipping.orders', x-message-ttl=40000"},
		{Kind: topology.DeclareQueue, Name: "shipping.orders.retry.80s", Detail: "durable, x-dead-letter-exchange='acemq.retry', x-dead-letter-routing-key='shipping.orders', x-message-ttl=80000"},
		{Kind: topology.DeclareQueue, Name: "shipping.orders.retry.160s", Detail: "durable, x-dead-letter-exchange='acemq.retry', x-dead-letter-routing-key='shipping.orders', x-message-ttl=160000"},
		{Kind: topology.DeclareBinding, Name: "shipping.orders.dlq", Detail: "from acemq.dlx on shipping.orders.dlq"},
		{Kind: topology.DeclareBinding, Name: "shipping.orders.parked", Detail: "from acemq.dlx on shipping.orders.parked"},
		{Kind: topology.DeclareBinding, Name: "shipping.orders", Detail: "from acemq.retry on shipping.orders"},
		{Kind: topology.DeclareBinding, Name: "shipping.orders", Detail: "from orders-events on order.placed"},
	}
	if !slices.Equal(plan, want) {
		t.Errorf("Plan() =\n%v\nwant\n%v", plan, want)
	}
	// The plan matches the typed lists.
	if got := len(tp.Exchanges()) + len(tp.Queues()) + len(tp.Bindings()); got != len(plan) {
		t.Errorf("Exchanges+Queues+Bindings = %d items, plan %d", got, len(plan))
	}
	// An invalid topology has no plan.
	bad := topology.New().Queue("a", topology.Quorum(), topology.Exclusive())
	if plan, err := bad.Plan(); err == nil || plan != nil {
		t.Errorf("invalid topology: Plan() = %v, %v; want nil and an error", plan, err)
	}
}

func TestActionString(t *testing.T) {
	tests := []struct {
		a    topology.Action
		want string
	}{
		{topology.Action{Kind: topology.DeclareQueue, Name: "orders.dlq", Detail: "durable"}, "declare queue orders.dlq (durable)"},
		{topology.Action{Kind: topology.DeclareQueue, Name: "tmp"}, "declare queue tmp"},
		{topology.Action{Kind: topology.DeclareExchange, Name: "e", Detail: "fanout"}, "declare exchange e (fanout)"},
		{topology.Action{Kind: topology.DeclareBinding, Name: "q", Detail: "from e on k"}, "declare binding q (from e on k)"},
	}
	for _, tc := range tests {
		if got := tc.a.String(); got != tc.want {
			t.Errorf("%#v.String() = %q, want %q", tc.a, got, tc.want)
		}
	}
	// A transient classic queue has no flags and no arguments: no parentheses.
	plan, err := topology.New().Queue("tmp", topology.Transient()).Plan()
	if err != nil || len(plan) != 1 || plan[0].String() != "declare queue tmp" {
		t.Errorf("Plan() = %v, %v; want [declare queue tmp]", plan, err)
	}
}

func mustQueue(t *testing.T, tp *topology.Topology, name string) topology.Queue {
	t.Helper()
	if err := tp.Validate(); err != nil {
		t.Fatalf("Validate() = %v", err)
	}
	q, ok := tp.QueueNamed(name)
	if !ok {
		t.Fatalf("queue %q is not declared; queues: %v", name, queueNames(tp))
	}
	return q
}

func queueNames(tp *topology.Topology) []string {
	var out []string
	for _, q := range tp.Queues() {
		out = append(out, q.Name)
	}
	return out
}

func exchangeNames(tp *topology.Topology) []string {
	var out []string
	for _, e := range tp.Exchanges() {
		out = append(out, e.Name)
	}
	return out
}

func bindingStrings(tp *topology.Topology) []string {
	var out []string
	for _, b := range tp.Bindings() {
		out = append(out, b.Queue+" <- "+b.Exchange+" on "+b.Key)
	}
	return out
}

// TestQueueArguments pins contract §2 for the queue a caller declares.
func TestQueueArguments(t *testing.T) {
	quorum := amqp.Table{"x-queue-type": "quorum"}
	tests := []struct {
		name       string
		opts       []topology.QueueOption
		args       amqp.Table // nil: no arguments at all
		durable    bool
		exclusive  bool
		autoDelete bool
	}{
		{"durable is quorum by default", nil, quorum, true, false, false},
		{"quorum asked for", []topology.QueueOption{topology.Quorum()}, quorum, true, false, false},
		{"classic leaves x-queue-type off", []topology.QueueOption{topology.Classic()}, nil, true, false, false},
		{"exclusive is classic", []topology.QueueOption{topology.Exclusive()}, nil, true, true, false},
		{"auto-delete is classic", []topology.QueueOption{topology.AutoDelete()}, nil, true, false, true},
		{"transient is classic", []topology.QueueOption{topology.Transient()}, nil, false, false, false},
		{"all three, classic", []topology.QueueOption{topology.Transient(), topology.Exclusive(), topology.AutoDelete()}, nil, false, true, true},
		{"exclusive and Classic()", []topology.QueueOption{topology.Exclusive(), topology.Classic()}, nil, true, true, false},
		{"stream in Args is kept", []topology.QueueOption{topology.Args(amqp.Table{"x-queue-type": "stream"})},
			amqp.Table{"x-queue-type": "stream"}, true, false, false},
		{"quorum in Args is kept", []topology.QueueOption{topology.Args(amqp.Table{"x-queue-type": "quorum"})}, quorum, true, false, false},
		{"other Args beside quorum", []topology.QueueOption{topology.Args(amqp.Table{"x-delivery-limit": 5})},
			amqp.Table{"x-queue-type": "quorum", "x-delivery-limit": 5}, true, false, false},
		{"int64 out of int32 range is fine", []topology.QueueOption{topology.Classic(), topology.Args(amqp.Table{"x-max-length-bytes": int64(1) << 40})},
			amqp.Table{"x-max-length-bytes": int64(1) << 40}, true, false, false},
		{"dead letter adds exactly two arguments", []topology.QueueOption{topology.DeadLetter()},
			amqp.Table{"x-queue-type": "quorum", "x-dead-letter-exchange": "acemq.dlx", "x-dead-letter-routing-key": "q.dlq"}, true, false, false},
		{"dead letter on classic", []topology.QueueOption{topology.Classic(), topology.DeadLetter()},
			amqp.Table{"x-dead-letter-exchange": "acemq.dlx", "x-dead-letter-routing-key": "q.dlq"}, true, false, false},
		{"retry adds no argument to the source queue", []topology.QueueOption{topology.Retry(retry.Exponential(6, 10*time.Second))}, quorum, true, false, false},
		{"retry on classic adds nothing", []topology.QueueOption{topology.Classic(), topology.Retry(retry.Fixed(3, time.Minute))}, nil, true, false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q := mustQueue(t, topology.New().Queue("q", tc.opts...), "q")
			if !reflect.DeepEqual(q.Args, tc.args) {
				t.Errorf("Args = %#v, want %#v", q.Args, tc.args)
			}
			if q.Durable != tc.durable || q.Exclusive != tc.exclusive || q.AutoDelete != tc.autoDelete {
				t.Errorf("durable %v exclusive %v auto-delete %v, want %v %v %v",
					q.Durable, q.Exclusive, q.AutoDelete, tc.durable, tc.exclusive, tc.autoDelete)
			}
			if v, ok := q.Args["x-queue-type"]; ok && v == "classic" {
				t.Error("x-queue-type='classic' is never declared")
			}
			if tc.args == nil {
				if _, ok := q.Args["x-queue-type"]; ok {
					t.Errorf("a classic queue has x-queue-type=%v; the key must be absent", q.Args["x-queue-type"])
				}
			}
		})
	}
}

// TestDerived pins what DeadLetter and Retry derive (contract §2).
func TestDerived(t *testing.T) {
	rungs := retry.Exponential(6, 10*time.Second) // broker rungs 40s 80s 160s
	noRungs := retry.Exponential(3, 10*time.Second)
	failureHalfQueues := []string{"q.dlq", "q.parked"}
	failureHalfBindings := []string{"q.dlq <- acemq.dlx on q.dlq", "q.parked <- acemq.dlx on q.parked"}
	tests := []struct {
		name      string
		opts      []topology.QueueOption
		exchanges []string
		queues    []string
		bindings  []string
	}{
		{"no options", nil, nil, []string{"q"}, nil},
		{"dead letter", []topology.QueueOption{topology.DeadLetter()},
			[]string{"acemq.dlx"}, append([]string{"q"}, failureHalfQueues...), failureHalfBindings},
		{"retry without broker rungs", []topology.QueueOption{topology.Retry(noRungs)},
			[]string{"acemq.dlx"}, append([]string{"q"}, failureHalfQueues...), failureHalfBindings},
		{"zero policy", []topology.QueueOption{topology.Retry(retry.Policy{})},
			[]string{"acemq.dlx"}, append([]string{"q"}, failureHalfQueues...), failureHalfBindings},
		{"dead letter and retry without broker rungs", []topology.QueueOption{topology.DeadLetter(), topology.Retry(noRungs)},
			[]string{"acemq.dlx"}, append([]string{"q"}, failureHalfQueues...), failureHalfBindings},
		{"retry with broker rungs", []topology.QueueOption{topology.Retry(rungs)},
			[]string{"acemq.dlx", "acemq.retry"},
			[]string{"q", "q.dlq", "q.parked", "q.retry.40s", "q.retry.80s", "q.retry.160s"},
			append(slices.Clone(failureHalfBindings), "q <- acemq.retry on q")},
		{"repeated broker waits make one rung each", []topology.QueueOption{topology.Retry(retry.Fixed(5, 2*time.Hour))},
			[]string{"acemq.dlx", "acemq.retry"},
			[]string{"q", "q.dlq", "q.parked", "q.retry.2h"},
			append(slices.Clone(failureHalfBindings), "q <- acemq.retry on q")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tp := topology.New().Queue("q", tc.opts...)
			if err := tp.Validate(); err != nil {
				t.Fatal(err)
			}
			if got := exchangeNames(tp); !slices.Equal(got, tc.exchanges) {
				t.Errorf("exchanges %v, want %v", got, tc.exchanges)
			}
			if got := queueNames(tp); !slices.Equal(got, tc.queues) {
				t.Errorf("queues %v, want %v", got, tc.queues)
			}
			if got := bindingStrings(tp); !slices.Equal(got, tc.bindings) {
				t.Errorf("bindings %v, want %v", got, tc.bindings)
			}
			for _, e := range tp.Exchanges() {
				if e.Kind != topology.Direct || !e.Durable || e.AutoDelete || e.Internal || e.Args != nil {
					t.Errorf("derived exchange %+v, want direct and durable only", e)
				}
			}
			for _, q := range tp.Queues()[1:] {
				if !q.Durable || q.Exclusive || q.AutoDelete {
					t.Errorf("derived queue %+v is not durable-only", q)
				}
				if _, typed := q.Args["x-queue-type"]; typed {
					t.Errorf("derived queue %s has x-queue-type: it must be classic", q.Name)
				}
				if q.DeadLetter || !q.Retry.Equal(retry.Policy{}) {
					t.Errorf("derived queue %s carries the source's options: %+v", q.Name, q)
				}
				if strings.Contains(q.Name, ".retry.") {
					continue
				}
				if q.Args != nil {
					t.Errorf("derived queue %s has arguments %v, want none", q.Name, q.Args)
				}
			}
		})
	}
}

func TestRungQueues(t *testing.T) {
	p := retry.Waits(40*time.Second, 2*time.Minute, 90*time.Minute, 2*time.Hour)
	tp := topology.New().Queue("q", topology.Retry(p))
	for _, d := range p.BrokerRungs() {
		q := mustQueue(t, tp, topology.RetryQueue("q", d))
		if !reflect.DeepEqual(q.Args, topology.RungArguments("q", d)) {
			t.Errorf("%s: Args %#v, want RungArguments %#v", q.Name, q.Args, topology.RungArguments("q", d))
		}
		ttl, ok := q.Args["x-message-ttl"].(int64)
		if !ok || ttl != d.Milliseconds() {
			t.Errorf("%s: x-message-ttl = %#v (%T), want int64 %d", q.Name, q.Args["x-message-ttl"], q.Args["x-message-ttl"], d.Milliseconds())
		}
	}
	if got, want := queueNames(tp), []string{"q", "q.dlq", "q.parked", "q.retry.40s", "q.retry.2m", "q.retry.90m", "q.retry.2h"}; !slices.Equal(got, want) {
		t.Errorf("queues %v, want %v", got, want)
	}
}

func TestQueueRecordsItsOptions(t *testing.T) {
	p := retry.Exponential(6, 10*time.Second)
	q := mustQueue(t, topology.New().Queue("q", topology.DeadLetter(), topology.Retry(p)), "q")
	if !q.DeadLetter || !q.Retry.Equal(p) {
		t.Errorf("Queue = %+v, want DeadLetter and the policy", q)
	}
}

func TestExchanges(t *testing.T) {
	tests := []struct {
		name   string
		opts   []topology.ExchangeOption
		want   topology.Exchange
		detail string
	}{
		{"topic is the default kind", nil, topology.Exchange{Name: "e", Kind: topology.Topic, Durable: true}, "topic, durable"},
		{"direct", []topology.ExchangeOption{topology.Direct}, topology.Exchange{Name: "e", Kind: topology.Direct, Durable: true}, "direct, durable"},
		{"fanout", []topology.ExchangeOption{topology.Fanout}, topology.Exchange{Name: "e", Kind: topology.Fanout, Durable: true}, "fanout, durable"},
		{"headers", []topology.ExchangeOption{topology.Headers}, topology.Exchange{Name: "e", Kind: topology.Headers, Durable: true}, "headers, durable"},
		{"transient", []topology.ExchangeOption{topology.Transient()}, topology.Exchange{Name: "e", Kind: topology.Topic}, "topic"},
		{"auto-delete", []topology.ExchangeOption{topology.AutoDelete()}, topology.Exchange{Name: "e", Kind: topology.Topic, Durable: true, AutoDelete: true}, "topic, durable, auto-delete"},
		{"internal", []topology.ExchangeOption{topology.Internal()}, topology.Exchange{Name: "e", Kind: topology.Topic, Durable: true, Internal: true}, "topic, durable, internal"},
		{"everything", []topology.ExchangeOption{topology.Internal(), topology.Headers, topology.AutoDelete(), topology.Transient(), topology.Args(amqp.Table{"b": "x", "a": int32(7)})},
			topology.Exchange{Name: "e", Kind: topology.Headers, AutoDelete: true, Internal: true, Args: amqp.Table{"a": int32(7), "b": "x"}},
			"headers, auto-delete, internal, a=7, b='x'"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tp := topology.New().Exchange("e", tc.opts...)
			plan, err := tp.Plan()
			if err != nil {
				t.Fatal(err)
			}
			if got := tp.Exchanges(); len(got) != 1 || !reflect.DeepEqual(got[0], tc.want) {
				t.Errorf("Exchanges() = %+v, want [%+v]", got, tc.want)
			}
			if len(plan) != 1 || plan[0] != (topology.Action{Kind: topology.DeclareExchange, Name: "e", Detail: tc.detail}) {
				t.Errorf("Plan() = %v, want detail %q", plan, tc.detail)
			}
		})
	}
}

func TestArgumentFormatting(t *testing.T) {
	tp := topology.New().
		Queue("q", topology.Classic(), topology.Args(amqp.Table{
			"x-max-priority": uint8(9), "s": "text", "by": []byte("raw"), "f": 1.5, "f0": float32(2), "b": true,
			"i16": int16(-3), "nested": amqp.Table{"z": 1, "a": "x"}, "list": []any{int64(1), "two"}, "nil": nil,
		})).
		Exchange("hx", topology.Headers).
		Binding("q", "hx", "", topology.Args(amqp.Table{"x-match": "all", "kind": "order"}))
	plan, err := tp.Plan()
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"declare exchange hx (headers, durable)",
		"declare queue q (durable, b=true, by='raw', f=1.5, f0=2.0, i16=-3, list=[1, 'two'], nested={a='x', z=1}, nil=void, s='text', x-max-priority=9)",
		"declare binding q (from hx on '', kind='order', x-match='all')",
	}
	for i, a := range plan {
		if i >= len(want) || a.String() != want[i] {
			t.Errorf("action %d = %q, want %q", i, a.String(), want[min(i, len(want)-1)])
		}
	}
}

// TestInvalid is one table row per §5 rule (and the §2 rules that §5
// enforces): each mistake is refused with an error that names the call.
func TestInvalid(t *testing.T) {
	long := strings.Repeat("n", 256)
	longest := strings.Repeat("n", 255)
	tests := []struct {
		name    string
		build   func(*topology.Topology)
		call    string // the call the error must name
		problem string // and a piece of what it says
	}{
		{"quorum and exclusive", func(tp *topology.Topology) { tp.Queue("a", topology.Quorum(), topology.Exclusive()) },
			`Queue("a", Quorum(), Exclusive())`, "quorum queue cannot be exclusive"},
		{"quorum and auto-delete", func(tp *topology.Topology) { tp.Queue("a", topology.AutoDelete(), topology.Quorum()) },
			`Queue("a", AutoDelete(), Quorum())`, "quorum queue cannot be"},
		{"quorum and transient", func(tp *topology.Topology) { tp.Queue("a", topology.Quorum(), topology.Transient()) },
			`Queue("a", Quorum(), Transient())`, "quorum queue cannot be"},
		{"quorum and classic", func(tp *topology.Topology) { tp.Queue("a", topology.Quorum(), topology.Classic()) },
			`Queue("a", Quorum(), Classic())`, "Quorum() and Classic() both given"},
		{"x-queue-type in Args and Quorum()", func(tp *topology.Topology) {
			tp.Queue("a", topology.Args(amqp.Table{"x-queue-type": "stream"}), topology.Quorum())
		}, `Queue("a", Args({x-queue-type='stream'}), Quorum())`, "say the type once"},
		{"x-queue-type=quorum in Args and Quorum()", func(tp *topology.Topology) {
			tp.Queue("a", topology.Quorum(), topology.Args(amqp.Table{"x-queue-type": "quorum"}))
		}, `Queue("a", Quorum(), Args({x-queue-type='quorum'}))`, "say the type once"},
		{"x-queue-type in Args and Classic()", func(tp *topology.Topology) {
			tp.Queue("a", topology.Classic(), topology.Args(amqp.Table{"x-queue-type": "quorum"}))
		}, `Queue("a", Classic(), Args({x-queue-type='quorum'}))`, "say the type once"},
		{"x-queue-type=classic in Args", func(tp *topology.Topology) {
			tp.Queue("a", topology.Args(amqp.Table{"x-queue-type": "classic"}))
		}, `Queue("a", Args({x-queue-type='classic'}))`, "give Classic()"},
		{"unknown x-queue-type", func(tp *topology.Topology) {
			tp.Queue("a", topology.Args(amqp.Table{"x-queue-type": "lazy"}))
		}, `Queue("a", Args({x-queue-type='lazy'}))`, "not a queue type"},
		{"stream and exclusive", func(tp *topology.Topology) {
			tp.Queue("a", topology.Exclusive(), topology.Args(amqp.Table{"x-queue-type": "stream"}))
		}, `Queue("a", Exclusive(), Args({x-queue-type='stream'}))`, "cannot be exclusive"},
		{"broker rung not whole seconds", func(tp *topology.Topology) {
			tp.Queue("a", topology.Retry(retry.Waits(1500*time.Millisecond).With(retry.InProcessLimit(0))))
		}, `Queue("a", Retry(`, "not a whole number of seconds"},
		{"invalid retry policy", func(tp *topology.Topology) { tp.Queue("a", topology.Retry(retry.Exponential(0, time.Second))) },
			`Queue("a", Retry(1 attempt, in-process up to 30s (invalid)))`, "attempts must be at least 1"},
		{"dead letter and x-dead-letter-exchange in Args", func(tp *topology.Topology) {
			tp.Queue("a", topology.DeadLetter(), topology.Args(amqp.Table{"x-dead-letter-exchange": "mine"}))
		}, `Queue("a", DeadLetter(), Args({x-dead-letter-exchange='mine'}))`, "both set the dead-letter route"},
		{"binding to an undeclared queue", func(tp *topology.Topology) { tp.Exchange("e").Binding("nobody", "e", "k") },
			`Binding("nobody", "e", "k")`, `queue "nobody" is not declared`},
		{"binding to an undeclared exchange", func(tp *topology.Topology) { tp.Queue("q").Binding("q", "nowhere", "k") },
			`Binding("q", "nowhere", "k")`, `exchange "nowhere" is not declared`},
		{"binding to the default exchange", func(tp *topology.Topology) { tp.Queue("q").Binding("q", "", "q") },
			`Binding("q", "", "q")`, "exchange name is empty"},
		{"empty queue name", func(tp *topology.Topology) { tp.Queue("") }, `Queue("")`, "queue name is empty"},
		{"empty exchange name", func(tp *topology.Topology) { tp.Exchange("") }, `Exchange("")`, "exchange name is empty"},
		{"empty binding queue", func(tp *topology.Topology) { tp.Exchange("e").Binding("", "e", "k") }, `Binding("", "e", "k")`, "queue name is empty"},
		{"queue name over 255 bytes", func(tp *topology.Topology) { tp.Queue(long) }, `Queue("` + long + `")`, "over 255 bytes"},
		{"exchange name over 255 bytes", func(tp *topology.Topology) { tp.Exchange(long) }, `Exchange("` + long + `")`, "over 255 bytes"},
		{"routing key over 255 bytes", func(tp *topology.Topology) { tp.Queue("q").Exchange("e").Binding("q", "e", long) },
			`Binding("q", "e", "` + long + `")`, "routing key is over 255 bytes"},
		{"multi-byte name over 255 bytes", func(tp *topology.Topology) { tp.Queue(strings.Repeat("é", 128)) }, `Queue("`, "over 255 bytes"},
		{"queue name starting amq.", func(tp *topology.Topology) { tp.Queue("amq.mine") }, `Queue("amq.mine")`, "starts with amq."},
		{"exchange name starting amq.", func(tp *topology.Topology) { tp.Exchange("amq.topic") }, `Exchange("amq.topic")`, "starts with amq."},
		{"derived name over 255 bytes", func(tp *topology.Topology) { tp.Queue(longest[:250], topology.DeadLetter()) },
			`Queue("` + longest[:250] + `", DeadLetter())`, "derived queue name"},
		{"derived rung name over 255 bytes", func(tp *topology.Topology) {
			tp.Queue(longest[:245], topology.Retry(retry.Fixed(2, 160*time.Second)))
		}, `Queue("` + longest[:245] + `", Retry(`, "derived queue name"},
		{"derived name starting amq.", func(tp *topology.Topology) { tp.Queue("amq", topology.DeadLetter()) },
			`Queue("amq", DeadLetter())`, `derived queue name "amq.dlq" starts with amq.`},
		{"derived name of a consumer starting amq.", func(tp *topology.Topology) { tp.Merge(topology.ForConsumer("amq", retry.Policy{})) },
			`ForConsumer("amq", 1 attempt, in-process up to 30s)`, `derived queue name "amq.dlq" starts with amq.`},
		{"unknown exchange kind", func(tp *topology.Topology) { tp.Exchange("e", topology.Kind("x-delayed-message")) },
			`Exchange("e", x-delayed-message)`, `unknown exchange kind "x-delayed-message"`},
		{"two exchange kinds", func(tp *topology.Topology) { tp.Exchange("e", topology.Direct, topology.Fanout) },
			`Exchange("e", direct, fanout)`, "more than one exchange kind"},
		{"same queue twice, different settings", func(tp *topology.Topology) { tp.Queue("q").Queue("q", topology.Classic()) },
			`Queue("q", Classic())`, `already declared differently by Queue("q")`},
		{"same queue twice, different policies", func(tp *topology.Topology) {
			tp.Queue("q", topology.Retry(retry.Fixed(3, time.Second))).Queue("q", topology.Retry(retry.Fixed(4, time.Second)))
		}, `Queue("q", Retry(4 attempts`, `already declared differently by Queue("q", Retry(3 attempts`},
		{"derived queue declared differently", func(tp *topology.Topology) { tp.Queue("q.dlq").Queue("q", topology.DeadLetter()) },
			`Queue("q", DeadLetter())`, `queue "q.dlq" is already declared differently by Queue("q.dlq")`},
		{"derived exchange declared differently", func(tp *topology.Topology) { tp.Exchange("acemq.dlx").Queue("q", topology.DeadLetter()) },
			`Queue("q", DeadLetter())`, `exchange "acemq.dlx" is already declared differently by Exchange("acemq.dlx")`},
		{"same exchange twice, different settings", func(tp *topology.Topology) { tp.Exchange("e").Exchange("e", topology.Fanout) },
			`Exchange("e", fanout)`, `already declared differently by Exchange("e")`},
		{"float x-message-ttl", func(tp *topology.Topology) { tp.Queue("q", topology.Args(amqp.Table{"x-message-ttl": 40000.0})) },
			`Queue("q", Args({x-message-ttl=40000.0}))`, "x-message-ttl must be an integer, not float64"},
		{"string x-max-length", func(tp *topology.Topology) { tp.Queue("q", topology.Args(amqp.Table{"x-max-length": "10"})) },
			`Queue("q", Args({x-max-length='10'}))`, "x-max-length must be an integer, not string"},
		{"Go int outside int32", func(tp *topology.Topology) { tp.Queue("q", topology.Args(amqp.Table{"x-max-length-bytes": 1 << 40})) },
			`Queue("q", Args({x-max-length-bytes=1099511627776}))`, "does not fit the 32 bits"},
		{"Go int below int32", func(tp *topology.Topology) { tp.Exchange("e", topology.Args(amqp.Table{"n": -1<<31 - 1})) },
			`Exchange("e", Args({n=-2147483649}))`, "does not fit the 32 bits"},
		{"Go int outside int32, nested", func(tp *topology.Topology) {
			tp.Queue("q").Exchange("e", topology.Headers).Binding("q", "e", "", topology.Args(amqp.Table{"l": []any{1 << 33}}))
		}, `Binding("q", "e", "", Args({l=[8589934592]}))`, "does not fit the 32 bits"},
		{"type AMQP cannot carry", func(tp *topology.Topology) { tp.Queue("q", topology.Args(amqp.Table{"u": uint64(1)})) },
			`Queue("q", Args({u=1}))`, "not supported"},
		{"empty argument name", func(tp *topology.Topology) { tp.Queue("q", topology.Args(amqp.Table{"": "x"})) },
			`Queue("q", Args({='x'}))`, "argument name"},
		{"nil queue option", func(tp *topology.Topology) { tp.Queue("q", nil) }, `Queue("q", <nil>)`, "an option is nil"},
		{"nil exchange option", func(tp *topology.Topology) { tp.Exchange("e", nil) }, `Exchange("e", <nil>)`, "an option is nil"},
		{"nil binding option", func(tp *topology.Topology) { tp.Queue("q").Exchange("e").Binding("q", "e", "k", nil) },
			`Binding("q", "e", "k", <nil>)`, "an option is nil"},
		{"ForConsumer with an invalid policy", func(tp *topology.Topology) {
			tp.Merge(topology.ForConsumer("q", retry.Fixed(2, 1500*time.Millisecond, retry.InProcessLimit(time.Second))))
		}, `ForConsumer("q", 2 attempts`, "not a whole number of seconds"},
		{"ForConsumer with a bad name", func(tp *topology.Topology) { tp.Merge(topology.ForConsumer("amq.q", retry.Policy{})) },
			`ForConsumer("amq.q", 1 attempt, in-process up to 30s)`, "starts with amq."},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tp := topology.New()
			tc.build(tp)
			err := tp.Validate()
			if err == nil {
				t.Fatalf("Validate() = nil; printout:\n%s", tp)
			}
			if !errors.Is(err, topology.ErrInvalid) {
				t.Errorf("errors.Is(err, topology.ErrInvalid) = false for %v", err)
			}
			found := false
			for _, e := range allErrors(err) {
				if !errors.Is(e, topology.ErrInvalid) {
					t.Errorf("%v does not match topology.ErrInvalid", e)
				}
				var te *topology.Error
				if !errors.As(e, &te) {
					t.Errorf("%v (%T) is not a *topology.Error", e, e)
					continue
				}
				if te.Error() != "topology: "+te.Call+": "+te.Problem {
					t.Errorf("Error() = %q does not name the call and the problem", te.Error())
				}
				if strings.HasPrefix(te.Call, tc.call) && strings.Contains(te.Problem, tc.problem) {
					found = true
				}
			}
			if !found {
				t.Errorf("no error names %s with %q; got:\n%v", tc.call, tc.problem, err)
			}
			if plan, perr := tp.Plan(); plan != nil || perr == nil || perr.Error() != err.Error() {
				t.Errorf("Plan() = %v, %v; want nil and Validate's error", plan, perr)
			}
			if !strings.Contains(tp.String(), "\n  invalid: topology: "+tc.call) {
				t.Errorf("String() does not list the mistake:\n%s", tp)
			}
		})
	}
}

func allErrors(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

func TestValidNames(t *testing.T) {
	longest := strings.Repeat("n", 255)
	tp := topology.New().
		Queue(longest, topology.Classic()).
		Exchange(longest).
		Binding(longest, longest, longest).
		Queue("amq", topology.Classic()).                      // only the prefix "amq." is reserved
		Queue("xamq.y", topology.Classic()).                   // and only at the start
		Queue(strings.Repeat("n", 248), topology.DeadLetter()) // n….parked is 255 bytes
	if err := tp.Validate(); err != nil {
		t.Errorf("Validate() = %v", err)
	}
}

func TestValidateReturnsEveryMistake(t *testing.T) {
	tp := topology.New().
		Queue("a", topology.Quorum(), topology.Exclusive()).        // 1
		Queue("").                                                  // 2
		Exchange("amq.x").                                          // 3
		Exchange("e", topology.Kind("bogus")).                      // 4
		Queue("b").Queue("b", topology.Classic()).                  // 5
		Binding("nobody", "nowhere", "k").                          // 6, 7
		Queue("c", topology.Args(amqp.Table{"x-message-ttl": 1.0})) // 8
	err := tp.Validate()
	if err == nil {
		t.Fatal("Validate() = nil")
	}
	errs := allErrors(err)
	if len(errs) != 8 {
		t.Errorf("Validate() returned %d errors, want 8:\n%v", len(errs), err)
	}
	for _, call := range []string{`Queue("a", Quorum(), Exclusive())`, `Queue("")`, `Exchange("amq.x")`, `Exchange("e", bogus)`,
		`Queue("b", Classic())`, `Binding("nobody", "nowhere", "k")`, `Queue("c", Args({x-message-ttl=1.0}))`} {
		if !strings.Contains(err.Error(), call) {
			t.Errorf("the error does not name %s:\n%v", call, err)
		}
	}
	// A refused declaration does not also make every binding to it an error.
	tp = topology.New().Queue("a", topology.Quorum(), topology.Exclusive()).Exchange("amq.e").Binding("a", "amq.e", "k")
	if errs := allErrors(tp.Validate()); len(errs) != 3 { // Queue, Exchange, and the binding's own amq. exchange name
		t.Errorf("got %d errors, want 3:\n%v", len(errs), tp.Validate())
	}
}

func TestSameQueueTwice(t *testing.T) {
	p := retry.Exponential(6, 10*time.Second)
	tp := topology.New().
		Exchange("e").
		Queue("q", topology.DeadLetter(), topology.Retry(p)).
		Binding("q", "e", "k").
		Queue("q", topology.Retry(retry.Exponential(6, 10*time.Second)), topology.DeadLetter()).
		Exchange("e", topology.Topic).
		Binding("q", "e", "k")
	plan, err := tp.Plan()
	if err != nil {
		t.Fatal(err)
	}
	want, _ := topology.New().Exchange("e").Queue("q", topology.DeadLetter(), topology.Retry(p)).Binding("q", "e", "k").Plan()
	if !slices.Equal(plan, want) {
		t.Errorf("declaring the same things twice: plan\n%v\nwant\n%v", plan, want)
	}
	checkUnique(t, plan)
	// Quorum() spelled out is the same queue as the default.
	if err := topology.New().Queue("q").Queue("q", topology.Quorum()).Queue("q", topology.Args(amqp.Table{"x-queue-type": "quorum"})).Validate(); err != nil {
		t.Errorf("three spellings of one quorum queue: %v", err)
	}
	// Binding args distinguish bindings.
	tp = topology.New().Queue("q").Exchange("h", topology.Headers).
		Binding("q", "h", "", topology.Args(amqp.Table{"x-match": "all"})).
		Binding("q", "h", "", topology.Args(amqp.Table{"x-match": "any"})).
		Binding("q", "h", "", topology.Args(amqp.Table{"x-match": "all"}))
	if got := len(tp.Bindings()); got != 2 {
		t.Errorf("got %d bindings, want 2: %v", got, tp.Bindings())
	}
}

func checkUnique(t *testing.T, plan []topology.Action) {
	t.Helper()
	seen := map[topology.Action]bool{}
	for _, a := range plan {
		if seen[a] {
			t.Errorf("%v appears twice", a)
		}
		seen[a] = true
	}
}

func TestApplyOrder(t *testing.T) {
	tp := topology.New().
		Binding("q2", "e2", "k2").
		Binding("q1", "e1", "k1").
		Queue("q2", topology.Classic()).
		Exchange("e2", topology.Fanout).
		Queue("q1", topology.DeadLetter()).
		Exchange("e1")
	plan, err := tp.Plan()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, a := range plan {
		got = append(got, string(a.Kind)+" "+a.Name+" "+a.Detail)
	}
	want := []string{
		"exchange e2 fanout, durable",
		"exchange acemq.dlx direct, durable",
		"exchange e1 topic, durable",
		"queue q2 durable",
		"queue q1 durable, x-dead-letter-exchange='acemq.dlx', x-dead-letter-routing-key='q1.dlq', x-queue-type='quorum'",
		"queue q1.dlq durable",
		"queue q1.parked durable",
		"binding q2 from e2 on k2",
		"binding q1 from e1 on k1",
		"binding q1.dlq from acemq.dlx on q1.dlq",
		"binding q1.parked from acemq.dlx on q1.parked",
	}
	if !slices.Equal(got, want) {
		t.Errorf("plan\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	checkGroups(t, plan)
	checkUnique(t, plan)
}

func TestForConsumer(t *testing.T) {
	t.Run("with broker rungs", func(t *testing.T) {
		tp := topology.ForConsumer("shipping.orders", retry.Exponential(6, 10*time.Second))
		plan, err := tp.Plan()
		if err != nil {
			t.Fatalf("ForConsumer does not validate although its source queue is not declared: %v", err)
		}
		// Exactly the contract printout minus the source queue and its own binding.
		var want []string
		for _, l := range strings.Split(strings.TrimSuffix(contractPrintout, "\n"), "\n")[1:] {
			if strings.Contains(l, "orders-events") || strings.HasPrefix(l, "  declare queue shipping.orders (") {
				continue
			}
			want = append(want, strings.TrimPrefix(l, "  "))
		}
		var got []string
		for _, a := range plan {
			got = append(got, a.String())
		}
		if !slices.Equal(got, want) {
			t.Errorf("plan\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		if _, ok := tp.QueueNamed("shipping.orders"); ok {
			t.Error("ForConsumer declares the source queue")
		}
		if !strings.HasPrefix(tp.String(), "Topology: 2 exchanges, 5 queues, 3 bindings\n") {
			t.Errorf("String() = %s", tp)
		}
	})
	t.Run("without broker rungs", func(t *testing.T) {
		tp := topology.ForConsumer("q", retry.Fixed(3, 5*time.Second))
		if err := tp.Validate(); err != nil {
			t.Fatal(err)
		}
		if got, want := exchangeNames(tp), []string{"acemq.dlx"}; !slices.Equal(got, want) {
			t.Errorf("exchanges %v, want %v", got, want)
		}
		if got, want := queueNames(tp), []string{"q.dlq", "q.parked"}; !slices.Equal(got, want) {
			t.Errorf("queues %v, want %v", got, want)
		}
		if got, want := bindingStrings(tp), []string{"q.dlq <- acemq.dlx on q.dlq", "q.parked <- acemq.dlx on q.parked"}; !slices.Equal(got, want) {
			t.Errorf("bindings %v, want %v (no home binding without broker rungs)", got, want)
		}
	})
	t.Run("matches what Queue derives", func(t *testing.T) {
		p := retry.Exponential(5, 20*time.Second)
		fc := topology.ForConsumer("q", p)
		q := topology.New().Queue("q", topology.Retry(p), topology.DeadLetter())
		qPlan, _ := q.Plan()
		fcPlan, err := fc.Plan()
		if err != nil {
			t.Fatal(err)
		}
		var withoutSource []topology.Action
		for _, a := range qPlan {
			if !(a.Kind == topology.DeclareQueue && a.Name == "q") {
				withoutSource = append(withoutSource, a)
			}
		}
		if !slices.Equal(fcPlan, withoutSource) {
			t.Errorf("ForConsumer plan\n%v\nQueue's failure half\n%v", fcPlan, withoutSource)
		}
		// A service's topology and its consumer's agree: merged, one of each.
		merged := topology.New().Queue("q", topology.Retry(p), topology.DeadLetter()).Merge(fc)
		mPlan, err := merged.Plan()
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(mPlan, qPlan) {
			t.Errorf("merged plan\n%v\nwant\n%v", mPlan, qPlan)
		}
	})
}

func TestMerge(t *testing.T) {
	p := retry.Exponential(6, 10*time.Second)
	events := topology.New().Exchange("orders-events")
	shipping := topology.New().
		Queue("shipping.orders", topology.DeadLetter(), topology.Retry(p)).
		Binding("shipping.orders", "orders-events", "order.placed")
	if shipping.Validate() == nil {
		t.Fatal("a fragment binding to an exchange it does not declare validates on its own")
	}

	t.Run("fragments", func(t *testing.T) {
		tp := topology.New().Merge(events, shipping)
		if got := tp.String(); got != contractPrintout {
			t.Errorf("merged:\n%s\nwant\n%s", got, contractPrintout)
		}
	})
	t.Run("the same fragment twice", func(t *testing.T) {
		tp := topology.New().Merge(events, shipping, events, shipping).Merge(shipping).Merge(nil)
		if got := tp.String(); got != contractPrintout {
			t.Errorf("merged twice:\n%s", got)
		}
		tp.Merge(tp)
		if got := tp.String(); got != contractPrintout {
			t.Errorf("merged into itself:\n%s", got)
		}
	})
	t.Run("order preserved", func(t *testing.T) {
		a := topology.New().Queue("a").Exchange("ea")
		b := topology.New().Queue("b").Exchange("eb")
		tp := topology.New().Queue("z").Merge(b, a)
		if got, want := queueNames(tp), []string{"z", "b", "a"}; !slices.Equal(got, want) {
			t.Errorf("queues %v, want %v", got, want)
		}
		if got, want := exchangeNames(tp), []string{"eb", "ea"}; !slices.Equal(got, want) {
			t.Errorf("exchanges %v, want %v", got, want)
		}
	})
	t.Run("different definitions of one name", func(t *testing.T) {
		other := topology.New().Exchange("orders-events", topology.Fanout)
		tp := topology.New().Merge(events, shipping, other)
		err := tp.Validate()
		if !errors.Is(err, topology.ErrInvalid) || !strings.Contains(err.Error(), `Exchange("orders-events", fanout): exchange "orders-events" is already declared differently by Exchange("orders-events")`) {
			t.Errorf("Validate() = %v", err)
		}
		q := topology.New().Queue("shipping.orders", topology.Classic())
		if err := topology.New().Merge(events, shipping, q).Validate(); err == nil {
			t.Error("two definitions of shipping.orders merged without an error")
		}
	})
	t.Run("mistakes travel", func(t *testing.T) {
		bad := topology.New().Queue("a", topology.Quorum(), topology.Transient())
		err := topology.New().Merge(bad).Validate()
		if err == nil || !strings.Contains(err.Error(), `Queue("a", Quorum(), Transient())`) {
			t.Errorf("Validate() = %v", err)
		}
	})
	t.Run("the fragments do not change", func(t *testing.T) {
		before := shipping.String()
		topology.New().Merge(shipping).Exchange("orders-events").Queue("x")
		if shipping.String() != before {
			t.Error("merging changed the fragment")
		}
	})
	t.Run("later calls on a fragment do not reach a merge", func(t *testing.T) {
		frag := topology.New().Queue("a")
		tp := topology.New().Merge(frag)
		frag.Queue("b")
		if got := queueNames(tp); !slices.Equal(got, []string{"a"}) {
			t.Errorf("queues %v", got)
		}
	})
	t.Run("merged again after merging", func(t *testing.T) {
		inner := topology.New().Merge(events)
		outer := topology.New().Merge(inner, shipping)
		if err := outer.Validate(); err != nil {
			t.Errorf("a merged fragment lost what it had merged: %v", err)
		}
	})
}

func TestCopies(t *testing.T) {
	tp := topology.New().
		Exchange("h", topology.Headers, topology.Args(amqp.Table{"alternate-exchange": "ae"})).
		Queue("q", topology.DeadLetter(), topology.Retry(retry.Fixed(2, time.Minute)),
			topology.Args(amqp.Table{"x-max-length": 10, "nested": amqp.Table{"a": "b"}, "list": []any{"x"}})).
		Binding("q", "h", "", topology.Args(amqp.Table{"x-match": "all"}))
	before := tp.String()

	for _, e := range tp.Exchanges() {
		if e.Args != nil {
			e.Args["alternate-exchange"] = "changed"
			e.Args["new"] = 1
		}
	}
	qs := tp.Queues()
	for _, q := range qs {
		for k := range q.Args {
			q.Args[k] = "changed"
		}
	}
	qs[0].Name = "renamed"
	qs = append(qs[:0], topology.Queue{Name: "other"})
	_ = qs
	for _, b := range tp.Bindings() {
		if b.Args != nil {
			b.Args["x-match"] = "any"
		}
	}
	if q, ok := tp.QueueNamed("q"); ok {
		q.Args["x-max-length"] = 99
		q.Args["nested"].(amqp.Table)["a"] = "changed"
		q.Args["list"].([]any)[0] = "changed"
	}
	if got := tp.String(); got != before {
		t.Errorf("mutating what the accessors returned changed the topology:\n%s\nwas\n%s", got, before)
	}

	// The tables handed to Args are copied too.
	in := amqp.Table{"x-max-length": 10, "nested": amqp.Table{"a": "b"}}
	opt := topology.Args(in)
	tp2 := topology.New().Queue("q", opt)
	in["x-max-length"] = 20
	in["nested"].(amqp.Table)["a"] = "changed"
	in["added"] = "x"
	q := mustQueue(t, tp2, "q")
	want := amqp.Table{"x-max-length": 10, "nested": amqp.Table{"a": "b"}, "x-queue-type": "quorum"}
	if !reflect.DeepEqual(q.Args, want) {
		t.Errorf("Args = %#v, want %#v", q.Args, want)
	}
	// One option value used in two calls does not share its table.
	tp3 := topology.New().Queue("a", opt).Queue("b", opt)
	a := mustQueue(t, tp3, "a")
	a.Args["x-max-length"] = 1
	if b := mustQueue(t, tp3, "b"); b.Args["x-max-length"] != 10 {
		t.Errorf("queue b's Args changed with a's: %v", b.Args)
	}

	// The options slice given to a call is copied.
	opts := []topology.QueueOption{topology.Classic()}
	tp4 := topology.New().Queue("x", opts...)
	opts[0] = topology.Quorum()
	tp5 := topology.New().Merge(tp4)
	if q := mustQueue(t, tp5, "x"); q.Args != nil {
		t.Errorf("changing the caller's options slice changed a replayed call: %v", q.Args)
	}
}

func TestQueueNamed(t *testing.T) {
	tp := topology.New().Queue("q", topology.DeadLetter())
	if _, ok := tp.QueueNamed("nope"); ok {
		t.Error("QueueNamed found an undeclared queue")
	}
	if q, ok := tp.QueueNamed("q.parked"); !ok || q.Name != "q.parked" || !q.Durable || q.Args != nil {
		t.Errorf("QueueNamed(q.parked) = %+v, %v", q, ok)
	}
}

func TestZeroTopology(t *testing.T) {
	var tp topology.Topology
	if got := tp.String(); got != "Topology: 0 exchanges, 0 queues, 0 bindings\n" {
		t.Errorf("String() = %q", got)
	}
	if plan, err := tp.Plan(); err != nil || len(plan) != 0 {
		t.Errorf("Plan() = %v, %v", plan, err)
	}
	tp.Exchange("orders-events").
		Queue("shipping.orders", topology.DeadLetter(), topology.Retry(retry.Exponential(6, 10*time.Second))).
		Binding("shipping.orders", "orders-events", "order.placed")
	if got := tp.String(); got != contractPrintout {
		t.Errorf("zero Topology:\n%s", got)
	}
	var merged topology.Topology
	merged.Merge(contractTopology())
	if got := merged.String(); got != contractPrintout {
		t.Errorf("zero Topology after Merge:\n%s", got)
	}
}

func TestOptionStrings(t *testing.T) {
	tests := []struct {
		got, want string
	}{
		{topology.Quorum().String(), "Quorum()"},
		{topology.Classic().String(), "Classic()"},
		{topology.Exclusive().String(), "Exclusive()"},
		{topology.AutoDelete().String(), "AutoDelete()"},
		{topology.Transient().String(), "Transient()"},
		{topology.DeadLetter().String(), "DeadLetter()"},
		{topology.Internal().String(), "Internal()"},
		{topology.Fanout.String(), "fanout"},
		{topology.Args(amqp.Table{"b": 1, "a": "x"}).String(), "Args({a='x', b=1})"},
		{topology.Retry(retry.Fixed(2, time.Minute)).String(), "Retry(2 attempts, waits [1m0s], in-process up to 30s)"},
	}
	for _, tc := range tests {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

// The duplicate-definition error says what each declaration is, and never
// reads as if a durable queue were not durable.
func TestDuplicateDefinitionMessage(t *testing.T) {
	err := topology.New().Queue("q", topology.Classic()).Queue("q").Validate()
	want := `queue "q" is already declared differently by Queue("q", Classic()) as (durable); this call declares it as (durable, x-queue-type='quorum')`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Validate() = %v\nwant it to contain %s", err, want)
	}
	if strings.Contains(err.Error(), "not durable") {
		t.Errorf("Validate() = %v: reads as if a queue were not durable", err)
	}
	err = topology.New().Exchange("e").Exchange("e", topology.Fanout).Validate()
	want = `exchange "e" is already declared differently by Exchange("e") as (topic, durable); this call declares it as (fanout, durable)`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Validate() = %v\nwant it to contain %s", err, want)
	}
}
