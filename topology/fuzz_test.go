package topology_test

import (
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/retry"
	"github.com/acemq/acemq-go/topology"
)

// FuzzBuilder drives the builder with a sequence of calls decoded from the
// input and checks that nothing panics and that every plan the package
// agrees to give keeps the contract's invariants — checked here from the
// plan itself, independently of Validate.
func FuzzBuilder(f *testing.F) {
	// Exchange("ab", Topic); Queue("q", DeadLetter(), Retry(Exponential(6,
	// 10s))); Binding("q", "ab", "orders"); Merge(ForConsumer("q", the same
	// policy)); String; Merge(a fragment declaring "ab" again); Merge(itself).
	f.Add([]byte{1, 0, 0, 1, 1, 3, 1, 0, 1, 0, 1, 0x60, 0, 3, 0, 5, 0, 1, 0, 7, 2, 4, 2, 0, 1, 1, 3, 0, 1, 0, 0,
		4, 0, 1, 1, 0, 7, 2, 4, 6, 3, 0, 2, 0, 0, 0, 0, 5})
	// Merge(ForConsumer("q", Exponential(6, 10s))); Exchange("ab");
	// Binding("q", "ab", ""): a consumer's queue, declared elsewhere.
	f.Add([]byte{1, 0, 4, 3, 0, 5, 0, 1, 0, 7, 2, 4, 0, 0, 3, 1, 0, 1, 0, 2, 0, 0, 0, 0, 0, 1})
	f.Add([]byte{})
	f.Add([]byte{0, 0, 1, 1, 2, 0x21, 3, 5, 6, 10, 2, 1, 0, 0, 0})
	f.Add([]byte{1, 3, 0xff, 0xff, 0xff, 0xff, 1, 3, 0x10, 2, 3, 3, 0, 1, 1, 0, 4, 3, 0})
	f.Add([]byte("queue shipping.orders, exchange orders-events, binding order.placed"))
	f.Fuzz(func(t *testing.T, data []byte) {
		d := &decoder{data: data}
		tp, sh := d.topology(0)
		_ = tp.String()
		plan, err := tp.Plan()
		if verr := tp.Validate(); (err == nil) != (verr == nil) {
			t.Fatalf("Plan() error %v, Validate() error %v", err, verr)
		}
		if err != nil {
			if plan != nil {
				t.Fatalf("Plan() returned a plan and an error")
			}
			return
		}
		checkPlan(t, tp, plan, sh)
	})
}

// shadow is what the fuzz harness knows a topology should contain, kept
// beside it: the rung queues its calls derive and the queues ForConsumer
// named (declared by somebody else, bound to anyway).
type shadow struct {
	rungs     map[string]int64 // rung queue → TTL in ms
	consumers map[string]bool
}

func newShadow() *shadow {
	return &shadow{rungs: map[string]int64{}, consumers: map[string]bool{}}
}

func (s *shadow) merge(o *shadow) {
	for k, v := range o.rungs {
		s.rungs[k] = v
	}
	for k := range o.consumers {
		s.consumers[k] = true
	}
}

func (s *shadow) retry(q string, p retry.Policy) {
	for _, r := range p.BrokerRungs() {
		s.rungs[topology.RungQueue(q, r)] = r.Milliseconds()
	}
}

func checkPlan(t *testing.T, tp *topology.Topology, plan []topology.Action, sh *shadow) {
	t.Helper()
	exchanges, queues, bindings := tp.Exchanges(), tp.Queues(), tp.Bindings()
	if len(plan) != len(exchanges)+len(queues)+len(bindings) {
		t.Fatalf("plan has %d actions, the lists %d+%d+%d", len(plan), len(exchanges), len(queues), len(bindings))
	}
	printout := "Topology: " + itoa(len(exchanges)) + " exchanges, " + itoa(len(queues)) + " queues, " + itoa(len(bindings)) + " bindings\n"
	for _, a := range plan {
		printout += "  " + a.String() + "\n"
	}
	if s := tp.String(); s != printout {
		t.Fatalf("String() of a valid topology is not its plan:\n%s\nplan:\n%s", s, printout)
	}

	rank := map[topology.ActionKind]int{topology.DeclareExchange: 0, topology.DeclareQueue: 1, topology.DeclareBinding: 2}
	seen := map[topology.Action]bool{}
	declaredEx := map[string]bool{}
	declaredQ := map[string]bool{}
	for i, a := range plan {
		r, ok := rank[a.Kind]
		if !ok {
			t.Fatalf("action %v has an unknown kind", a)
		}
		if i > 0 && rank[plan[i-1].Kind] > r {
			t.Fatalf("%v comes after %v: not exchanges, queues, bindings", a, plan[i-1])
		}
		if seen[a] {
			t.Fatalf("%v appears twice", a)
		}
		seen[a] = true
		checkName(t, a.Name)
		switch a.Kind {
		case topology.DeclareExchange:
			if declaredEx[a.Name] {
				t.Fatalf("exchange %q declared twice", a.Name)
			}
			declaredEx[a.Name] = true
			if e := exchanges[i]; e.Name != a.Name {
				t.Fatalf("plan and Exchanges() disagree at %d: %v, %+v", i, a, e)
			}
		case topology.DeclareQueue:
			if declaredQ[a.Name] {
				t.Fatalf("queue %q declared twice", a.Name)
			}
			declaredQ[a.Name] = true
			if q := queues[i-len(exchanges)]; q.Name != a.Name {
				t.Fatalf("plan and Queues() disagree at %d: %v, %+v", i, a, q)
			}
		case topology.DeclareBinding:
			if b := bindings[i-len(exchanges)-len(queues)]; b.Queue != a.Name {
				t.Fatalf("plan and Bindings() disagree at %d: %v, %+v", i, a, b)
			}
		}
	}

	for _, b := range bindings {
		if !declaredQ[b.Queue] && !sh.consumers[b.Queue] {
			t.Fatalf("binding %+v: queue %q is not in the plan", b, b.Queue)
		}
		if !declaredEx[b.Exchange] {
			t.Fatalf("binding %+v: exchange %q is not in the plan", b, b.Exchange)
		}
		checkName(t, b.Exchange)
		if len(b.Key) > topology.MaxNameLength {
			t.Fatalf("binding %+v: key over 255 bytes", b)
		}
	}
	for _, e := range exchanges {
		switch e.Kind {
		case topology.Direct, topology.Topic, topology.Fanout, topology.Headers:
		default:
			t.Fatalf("exchange %+v has kind %q", e, e.Kind)
		}
	}
	for _, q := range queues {
		typ, typed := q.Args["x-queue-type"]
		if typed && typ == "classic" {
			t.Fatalf("queue %+v has x-queue-type='classic'", q)
		}
		if typ == "quorum" && (!q.Durable || q.Exclusive || q.AutoDelete) {
			t.Fatalf("quorum queue %+v is not durable-only", q)
		}
		if q.DeadLetter && (q.Args["x-dead-letter-exchange"] != topology.DeadLetterExchange ||
			q.Args["x-dead-letter-routing-key"] != topology.DeadLetterQueue(q.Name)) {
			t.Fatalf("queue %+v: DeadLetter() did not add the dead-letter route", q)
		}
		if q.Args["x-dead-letter-exchange"] == topology.RetryExchange {
			checkTTL(t, q)
		}
		if want, rung := sh.rungs[q.Name]; rung {
			ttl := checkTTL(t, q)
			if ttl != want {
				t.Fatalf("rung %s: x-message-ttl %d, want %d", q.Name, ttl, want)
			}
			if typed || !q.Durable || q.Exclusive || q.AutoDelete {
				t.Fatalf("rung %+v is not durable classic", q)
			}
		}
	}
	for name := range sh.rungs {
		if !declaredQ[name] {
			t.Fatalf("rung %s is derived by a call but not in the plan", name)
		}
	}
}

func checkTTL(t *testing.T, q topology.Queue) int64 {
	t.Helper()
	ttl, ok := q.Args["x-message-ttl"].(int64)
	if !ok {
		t.Fatalf("rung %s: x-message-ttl is %T, want int64", q.Name, q.Args["x-message-ttl"])
	}
	if ttl <= 0 || ttl%1000 != 0 {
		t.Fatalf("rung %s: x-message-ttl %d is not a positive whole number of seconds", q.Name, ttl)
	}
	return ttl
}

func checkName(t *testing.T, name string) {
	t.Helper()
	if name == "" || len(name) > topology.MaxNameLength || strings.HasPrefix(name, "amq.") {
		t.Fatalf("name %q (%d bytes) in a valid plan", name, len(name))
	}
}

func itoa(n int) string {
	const digits = "0123456789"
	if n < 10 {
		return digits[n : n+1]
	}
	return itoa(n/10) + digits[n%10:n%10+1]
}

// maxSteps bounds the calls one input makes, so that each run stays fast
// enough for the fuzzer to minimise what it finds.
const maxSteps = 200

// decoder turns fuzz bytes into builder calls. Past the end of the input
// every byte reads as zero, so every input decodes to something.
type decoder struct {
	data  []byte
	names []string
	steps int
}

func (d *decoder) byte() byte {
	if len(d.data) == 0 {
		return 0
	}
	b := d.data[0]
	d.data = d.data[1:]
	return b
}

func (d *decoder) intn(n int) int { return int(d.byte()) % n }

func (d *decoder) bit() bool { return d.byte()&1 == 1 }

var fixedNames = []string{
	"a", "b", "q", "orders", "a.dlq", "a.parked", "a.retry.40s", "a.retry.1m", "q.retry.2m",
	topology.DeadLetterExchange, topology.RetryExchange, "amq.topic", "amq.", "amq", "",
	strings.Repeat("n", 248), strings.Repeat("n", 250), strings.Repeat("n", 255), strings.Repeat("n", 256),
	strings.Repeat("é", 127), strings.Repeat("é", 128),
}

// name draws a name: one used before, a fixed one, or new bytes from the
// input. Spaces and quotes are left out of new names: they are legal in
// AMQP, but "e on k" could make two different bindings print the same line.
func (d *decoder) name() string {
	switch d.intn(4) {
	case 0:
		if len(d.names) > 0 {
			return d.names[d.intn(len(d.names))]
		}
		return "a"
	case 1:
		return fixedNames[d.intn(len(fixedNames))]
	case 2:
		n := d.intn(12)
		var b strings.Builder
		for range n {
			c := d.byte()
			if c == ' ' || c == '\'' {
				c = '_'
			}
			b.WriteByte(c)
		}
		s := b.String()
		d.names = append(d.names, s)
		return s
	default:
		const alphabet = "ab.-_q1"
		n := 1 + d.intn(8)
		var b strings.Builder
		for range n {
			b.WriteByte(alphabet[d.intn(len(alphabet))])
		}
		if d.bit() {
			b.WriteString(strings.Repeat("x", d.intn(256)))
		}
		s := b.String()
		d.names = append(d.names, s)
		return s
	}
}

var units = []time.Duration{0, 500 * time.Millisecond, time.Second, 1500 * time.Millisecond, 10 * time.Second, time.Minute, time.Hour, 24 * time.Hour}

func (d *decoder) duration() time.Duration {
	return time.Duration(d.intn(9)-1) * units[d.intn(len(units))]
}

func (d *decoder) policy() retry.Policy {
	var opts []retry.Option
	if d.intn(3) == 0 {
		opts = append(opts, retry.InProcessLimit(d.duration()))
	}
	switch d.intn(5) {
	case 0:
		return retry.Exponential(d.intn(10)-1, d.duration(), opts...)
	case 1:
		return retry.Fixed(d.intn(10)-1, d.duration(), opts...)
	case 2:
		ws := make([]time.Duration, d.intn(6))
		for i := range ws {
			ws[i] = d.duration()
		}
		return retry.Waits(ws...).With(opts...)
	case 3:
		return retry.Exponential(d.intn(40), time.Duration(d.intn(4)+1)*units[d.intn(len(units))], opts...)
	default:
		return retry.Policy{}
	}
}

var argKeys = []string{"x-queue-type", "x-message-ttl", "x-max-length", "x-expires", "x-delivery-limit", "x-match", "k", "x-dead-letter-routing-key", ""}

func (d *decoder) value() any {
	switch d.intn(10) {
	case 0:
		return []string{"quorum", "classic", "stream", "lazy", "all", "any"}[d.intn(6)]
	case 1:
		return int(d.byte()) << (8 * d.intn(6))
	case 2:
		return int64(d.byte()) << (8 * d.intn(8))
	case 3:
		return int32(d.byte())
	case 4:
		return float64(d.byte())
	case 5:
		return uint64(d.byte())
	case 6:
		return []byte("quorum")
	case 7:
		return amqp.Table{"n": int(d.byte()) << (8 * d.intn(6))}
	case 8:
		return []any{int(d.byte()) << (8 * d.intn(6)), "x"}
	default:
		return nil
	}
}

func (d *decoder) args() topology.ArgsOption {
	t := amqp.Table{}
	for range d.intn(4) {
		t[argKeys[d.intn(len(argKeys))]] = d.value()
	}
	if d.intn(8) == 0 {
		t = nil
	}
	return topology.Args(t)
}

func (d *decoder) kind() topology.Kind {
	return []topology.Kind{topology.Direct, topology.Topic, topology.Fanout, topology.Headers, "", "x-delayed-message"}[d.intn(6)]
}

// topology decodes a sequence of calls onto a new topology; depth bounds
// how deep fragments nest.
func (d *decoder) topology(depth int) (*topology.Topology, *shadow) {
	var tp *topology.Topology
	if d.bit() {
		tp = topology.New()
	} else {
		tp = &topology.Topology{}
	}
	sh := newShadow()
	n := d.intn(16)
	if depth == 0 {
		n = maxSteps // until the input runs out
	}
	for i := 0; i < n && (len(d.data) > 0 || depth > 0) && d.steps < maxSteps; i++ {
		d.steps++
		switch d.intn(7) {
		case 0:
			var opts []topology.ExchangeOption
			mask := d.byte()
			if mask&1 != 0 {
				opts = append(opts, d.kind())
			}
			if mask&2 != 0 {
				opts = append(opts, d.kind())
			}
			if mask&4 != 0 {
				opts = append(opts, topology.Transient())
			}
			if mask&8 != 0 {
				opts = append(opts, topology.AutoDelete())
			}
			if mask&16 != 0 {
				opts = append(opts, topology.Internal())
			}
			if mask&32 != 0 {
				opts = append(opts, d.args())
			}
			if mask&64 != 0 {
				opts = append(opts, nil)
			}
			tp.Exchange(d.name(), opts...)
		case 1:
			var opts []topology.QueueOption
			mask := uint16(d.byte()) | uint16(d.byte())<<8
			name := d.name()
			each := []func() topology.QueueOption{
				topology.Quorum, topology.Classic, topology.Exclusive,
				func() topology.QueueOption { return topology.AutoDelete() },
				func() topology.QueueOption { return topology.Transient() }, topology.DeadLetter,
				func() topology.QueueOption {
					p := d.policy()
					sh.retry(name, p)
					return topology.Retry(p)
				},
				func() topology.QueueOption { return d.args() },
				func() topology.QueueOption { return nil },
			}
			for j, o := range each {
				if mask&(1<<j) != 0 {
					opts = append(opts, o())
				}
			}
			if mask&(1<<10) != 0 { // the same options in another order
				for j, k := 0, len(opts)-1; j < k; j, k = j+1, k-1 {
					opts[j], opts[k] = opts[k], opts[j]
				}
			}
			tp.Queue(name, opts...)
		case 2:
			var opts []topology.BindingOption
			if d.bit() {
				opts = append(opts, d.args())
			}
			key := ""
			if d.bit() {
				key = d.name()
			}
			tp.Binding(d.name(), d.name(), key, opts...)
		case 3:
			if depth < 2 {
				frag, fsh := d.topology(depth + 1)
				tp.Merge(frag)
				sh.merge(fsh)
			}
		case 4:
			q, p := d.name(), d.policy()
			fc := topology.ForConsumer(q, p)
			tp.Merge(fc)
			sh.consumers[q] = true
			sh.retry(q, p)
		case 5:
			tp.Merge(tp)
		default:
			_ = tp.String()
			_, _ = tp.Plan()
		}
	}
	return tp, sh
}
