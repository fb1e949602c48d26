package topology_test

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/internal/conformance"
	"github.com/acemq/acemq-go/retry"
	"github.com/acemq/acemq-go/topology"
)

// contractPrintout is the contract example's printout, taken from
// conformance/topologies.json: the vectors are the single source (the
// printout itself is checked by TestConformanceTopologies); the tests here
// use it to pin what Go's API does around it (merging, plans, the zero
// Topology).
var contractPrintout = func() string {
	var v conformance.Topologies
	if err := conformance.Load("topologies.json", &v); err != nil {
		panic(err)
	}
	for _, tv := range v.Topologies {
		if tv.Name == "contract example" {
			return strings.Join(tv.Printout, "\n") + "\n"
		}
	}
	panic("conformance/topologies.json has no \"contract example\"")
}()

// contractTopology is the contract example's topology.
func contractTopology() *topology.Topology {
	return topology.New().
		Exchange("orders-events", topology.Topic).
		Queue("shipping.orders", topology.DeadLetter(), topology.Retry(retry.Exponential(6, 10*time.Second))).
		Binding("shipping.orders", "orders-events", "order.placed")
}

// TestContractPrintoutWhateverTheOrder writes the contract example's topology in every order
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

func TestQueueRecordsItsOptions(t *testing.T) {
	p := retry.Exponential(6, 10*time.Second)
	q := mustQueue(t, topology.New().Queue("q", topology.DeadLetter(), topology.Retry(p)), "q")
	if !q.DeadLetter || !q.Retry.Equal(p) {
		t.Errorf("Queue = %+v, want DeadLetter and the policy", q)
	}
}

func TestExchanges(t *testing.T) {
	// The printout of each is conformance/topologies.json's; here, the
	// values Exchanges() hands out.
	tests := []struct {
		name string
		opts []topology.ExchangeOption
		want topology.Exchange
	}{
		{"topic is the default kind", nil, topology.Exchange{Name: "e", Kind: topology.Topic, Durable: true}},
		{"direct", []topology.ExchangeOption{topology.Direct}, topology.Exchange{Name: "e", Kind: topology.Direct, Durable: true}},
		{"fanout", []topology.ExchangeOption{topology.Fanout}, topology.Exchange{Name: "e", Kind: topology.Fanout, Durable: true}},
		{"headers", []topology.ExchangeOption{topology.Headers}, topology.Exchange{Name: "e", Kind: topology.Headers, Durable: true}},
		{"transient", []topology.ExchangeOption{topology.Transient()}, topology.Exchange{Name: "e", Kind: topology.Topic}},
		{"auto-delete", []topology.ExchangeOption{topology.AutoDelete()}, topology.Exchange{Name: "e", Kind: topology.Topic, Durable: true, AutoDelete: true}},
		{"internal", []topology.ExchangeOption{topology.Internal()}, topology.Exchange{Name: "e", Kind: topology.Topic, Durable: true, Internal: true}},
		{"everything", []topology.ExchangeOption{topology.Internal(), topology.Headers, topology.AutoDelete(), topology.Transient(), topology.Args(map[string]any{"b": "x", "a": int32(7)})},
			topology.Exchange{Name: "e", Kind: topology.Headers, AutoDelete: true, Internal: true, Args: amqp.Table{"a": int32(7), "b": "x"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tp := topology.New().Exchange("e", tc.opts...)
			if err := tp.Validate(); err != nil {
				t.Fatal(err)
			}
			if got := tp.Exchanges(); len(got) != 1 || !reflect.DeepEqual(got[0], tc.want) {
				t.Errorf("Exchanges() = %+v, want [%+v]", got, tc.want)
			}
		})
	}
}

// TestInvalid pins Go's own refusals (nil options, Go ints amqp091-go would
// truncate, types AMQP cannot carry, two kinds) and the shape of every
// error: a *topology.Error naming the call, matching ErrInvalid, listed by
// String().
func TestInvalid(t *testing.T) {
	tests := []struct {
		name    string
		build   func(*topology.Topology)
		call    string // the call the error must name
		problem string // and a piece of what it says
	}{
		// Every rule of docs/contract.md, "Validation", is a case of conformance/validation.json
		// (TestConformanceValidation); these rows are Go's own mistakes.
		{"quorum and classic", func(tp *topology.Topology) { tp.Queue("a", topology.Quorum(), topology.Classic()) },
			`Queue("a", Quorum(), Classic())`, "Quorum() and Classic() both given"},
		{"empty binding queue", func(tp *topology.Topology) { tp.Exchange("e").Binding("", "e", "k") }, `Binding("", "e", "k")`, "queue name is empty"},
		{"derived name of a consumer starting amq.", func(tp *topology.Topology) { tp.Merge(topology.ForConsumer("amq", retry.Policy{})) },
			`ForConsumer("amq", 1 attempt, in-process up to 30s)`, `derived queue name "amq.dlq" starts with amq.`},
		{"two exchange kinds", func(tp *topology.Topology) { tp.Exchange("e", topology.Direct, topology.Fanout) },
			`Exchange("e", direct, fanout)`, "more than one exchange kind"},
		{"Go int outside int32", func(tp *topology.Topology) {
			tp.Queue("q", topology.Args(map[string]any{"x-max-length-bytes": 1 << 40}))
		},
			`Queue("q", Args({x-max-length-bytes=1099511627776}))`, "does not fit the 32 bits"},
		{"Go int below int32", func(tp *topology.Topology) { tp.Exchange("e", topology.Args(map[string]any{"n": -1<<31 - 1})) },
			`Exchange("e", Args({n=-2147483649}))`, "does not fit the 32 bits"},
		{"Go int outside int32, nested", func(tp *topology.Topology) {
			tp.Queue("q").Exchange("e", topology.Headers).Binding("q", "e", "", topology.Args(map[string]any{"l": []any{1 << 33}}))
		}, `Binding("q", "e", "", Args({l=[8589934592]}))`, "does not fit the 32 bits"},
		{"type AMQP cannot carry", func(tp *topology.Topology) { tp.Queue("q", topology.Args(map[string]any{"u": uint64(1)})) },
			`Queue("q", Args({u=1}))`, "not supported"},
		{"empty argument name", func(tp *topology.Topology) { tp.Queue("q", topology.Args(map[string]any{"": "x"})) },
			`Queue("q", Args({='x'}))`, "argument name"},
		{"nil queue option", func(tp *topology.Topology) { tp.Queue("q", nil) }, `Queue("q", <nil>)`, "an option is nil"},
		{"nil exchange option", func(tp *topology.Topology) { tp.Exchange("e", nil) }, `Exchange("e", <nil>)`, "an option is nil"},
		{"nil binding option", func(tp *topology.Topology) { tp.Queue("q").Exchange("e").Binding("q", "e", "k", nil) },
			`Binding("q", "e", "k", <nil>)`, "an option is nil"},
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

func TestValidateReturnsEveryMistake(t *testing.T) {
	tp := topology.New().
		Queue("a", topology.Quorum(), topology.Exclusive()).            // 1
		Queue("").                                                      // 2
		Exchange("amq.x").                                              // 3
		Exchange("e", topology.Kind("bogus")).                          // 4
		Queue("b").Queue("b", topology.Classic()).                      // 5
		Binding("nobody", "nowhere", "k").                              // 6, 7
		Queue("c", topology.Args(map[string]any{"x-message-ttl": 1.0})) // 8
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
	if err := topology.New().Queue("q").Queue("q", topology.Quorum()).Queue("q", topology.Args(map[string]any{"x-queue-type": "quorum"})).Validate(); err != nil {
		t.Errorf("three spellings of one quorum queue: %v", err)
	}
	// Binding args distinguish bindings.
	tp = topology.New().Queue("q").Exchange("h", topology.Headers).
		Binding("q", "h", "", topology.Args(map[string]any{"x-match": "all"})).
		Binding("q", "h", "", topology.Args(map[string]any{"x-match": "any"})).
		Binding("q", "h", "", topology.Args(map[string]any{"x-match": "all"}))
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
		Exchange("h", topology.Headers, topology.Args(map[string]any{"alternate-exchange": "ae"})).
		Queue("q", topology.DeadLetter(), topology.Retry(retry.Fixed(2, time.Minute)),
			topology.Args(map[string]any{"x-max-length": 10, "nested": amqp.Table{"a": "b"}, "list": []any{"x"}})).
		Binding("q", "h", "", topology.Args(map[string]any{"x-match": "all"}))
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
		{topology.Args(map[string]any{"b": 1, "a": "x"}).String(), "Args({a='x', b=1})"},
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

// A derived queue declared elsewhere (an operator's .dlq with a length
// limit) is marked Existing: the plan checks it instead of declaring it,
// in its place among the queues, whichever call comes first; the rest of
// the printout is unchanged.
func TestExistingDerivedQueue(t *testing.T) {
	policy := retry.Exponential(3, 10*time.Second)
	own := topology.New().Queue("billing", topology.DeadLetter(), topology.Retry(policy))
	for name, topo := range map[string]*topology.Topology{
		"after":  topology.New().Queue("billing", topology.DeadLetter(), topology.Retry(policy)).Queue("billing.dlq", topology.Existing()),
		"before": topology.New().Queue("billing.dlq", topology.Existing()).Queue("billing", topology.DeadLetter(), topology.Retry(policy)),
		"merged": topology.New().Queue("billing", topology.DeadLetter(), topology.Retry(policy)).Merge(topology.New().Queue("billing.dlq", topology.Existing())),
	} {
		if err := topo.Validate(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		want := strings.Replace(own.String(), "  declare queue billing.dlq (durable)\n", "  check queue billing.dlq (declared elsewhere)\n", 1)
		if name == "before" {
			// The existing queue was met first: first among the queues.
			lines := strings.Split(own.String(), "\n")
			i := slices.Index(lines, "  declare queue billing.dlq (durable)")
			lines = slices.Delete(lines, i, i+1)
			j := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "  declare queue ") })
			want = strings.Join(slices.Insert(lines, j, "  check queue billing.dlq (declared elsewhere)"), "\n")
		}
		if got := topo.String(); got != want {
			t.Errorf("%s: printout\n%s\nwant\n%s", name, got, want)
		}
		q, ok := topo.QueueNamed("billing.dlq")
		if !ok || !q.Existing {
			t.Errorf("%s: QueueNamed(billing.dlq) = %+v, %v; want it Existing", name, q, ok)
		}
	}
	// The queue's settings are its owner's: Existing takes no option that
	// would declare it; a queue declared here and marked existing is a
	// contradiction.
	for _, bad := range []*topology.Topology{
		topology.New().Queue("audit", topology.Existing(), topology.Quorum()),
		topology.New().Queue("audit", topology.Existing(), topology.DeadLetter()),
		topology.New().Queue("audit", topology.Classic()).Queue("audit", topology.Existing()),
	} {
		if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "Existing()") {
			t.Errorf("%s: Validate %v, want a refusal naming Existing()", bad, err)
		}
	}
	// An existing queue may have a retry policy: its failure half and
	// rungs are declared for it, as for a consumer's (ForConsumer).
	ext := topology.New().Queue("audit", topology.Existing(), topology.Retry(retry.Exponential(4, 20*time.Second)))
	if err := ext.Validate(); err != nil {
		t.Fatal(err)
	}
	if q, _ := ext.QueueNamed("audit"); !q.Existing || !q.HasRetry {
		t.Errorf("audit: %+v, want Existing with its policy", q)
	}
	if _, ok := ext.QueueNamed("audit.retry.40s"); !ok {
		t.Errorf("no rung declared for the existing queue:\n%s", ext)
	}
}
