package topology

import (
	"fmt"
	"slices"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/retry"
)

// ExchangeOption configures an exchange declared with [Topology.Exchange].
type ExchangeOption interface {
	applyExchange(*exchangeSpec)
	String() string
}

// QueueOption configures a queue declared with [Topology.Queue].
type QueueOption interface {
	applyQueue(*queueSpec)
	String() string
}

// BindingOption configures a binding declared with [Topology.Binding].
type BindingOption interface {
	applyBinding(*Binding)
	String() string
}

// Kind is an exchange type. The four kinds are themselves exchange options:
// [Exchange]("audit", topology.Fanout). With no kind an exchange is a topic
// exchange.
type Kind string

// The exchange kinds RabbitMQ always has.
const (
	// Direct routes on an exact routing key.
	Direct Kind = "direct"
	// Topic routes on a pattern (* one word, # zero or more); the default.
	Topic Kind = "topic"
	// Fanout copies to every bound queue and ignores the routing key.
	Fanout Kind = "fanout"
	// Headers routes on header values instead of the routing key.
	Headers Kind = "headers"
)

func (k Kind) applyExchange(e *exchangeSpec) { e.kinds = append(e.kinds, k) }

// String is the kind as the broker spells it.
func (k Kind) String() string { return string(k) }

func (k Kind) known() bool {
	switch k {
	case Direct, Topic, Fanout, Headers:
		return true
	}
	return false
}

// flag is an option that sets one boolean; some apply to queues and
// exchanges alike.
type flag struct {
	name string
	q    func(*queueSpec)
	e    func(*exchangeSpec)
}

func (f flag) String() string { return f.name + "()" }
func (f flag) applyQueue(s *queueSpec) {
	if f.q != nil {
		f.q(s)
	}
}
func (f flag) applyExchange(s *exchangeSpec) {
	if f.e != nil {
		f.e(s)
	}
}

// queueFlag is a flag that only queues take.
type queueFlag struct{ flag }

func (f queueFlag) String() string { return f.flag.String() }

// exchangeFlag is a flag that only exchanges take.
type exchangeFlag struct{ flag }

func (f exchangeFlag) String() string { return f.flag.String() }

// QueueExchangeOption is an option both queues and exchanges accept.
type QueueExchangeOption interface {
	QueueOption
	ExchangeOption
}

// Transient declares a non-durable queue or exchange (default: durable). A
// transient queue is classic: RabbitMQ refuses non-durable quorum queues.
func Transient() QueueExchangeOption {
	return flag{name: "Transient",
		q: func(s *queueSpec) { s.transient = true },
		e: func(s *exchangeSpec) { s.transient = true }}
}

// AutoDelete declares a queue or exchange the broker deletes when its last
// consumer or binding goes (default: off). An auto-delete queue is classic.
func AutoDelete() QueueExchangeOption {
	return flag{name: "AutoDelete",
		q: func(s *queueSpec) { s.autoDelete = true },
		e: func(s *exchangeSpec) { s.autoDelete = true }}
}

// Exclusive declares a queue owned by the declaring connection (default:
// off). An exclusive queue is classic.
func Exclusive() QueueOption {
	return queueFlag{flag{name: "Exclusive", q: func(s *queueSpec) { s.exclusive = true }}}
}

// Quorum asks for a quorum queue explicitly. A durable queue is one anyway;
// asking for it together with [Exclusive], [AutoDelete] or [Transient] is an error
// caught before the broker sees it.
func Quorum() QueueOption {
	return queueFlag{flag{name: "Quorum", q: func(s *queueSpec) { s.quorum = true }}}
}

// Classic asks for a classic queue, declared by leaving x-queue-type off
// (never x-queue-type='classic').
func Classic() QueueOption {
	return queueFlag{flag{name: "Classic", q: func(s *queueSpec) { s.classic = true }}}
}

// DeadLetter adds x-dead-letter-exchange=acemq.dlx and
// x-dead-letter-routing-key=<queue>.dlq to the queue — the broker's own
// route for messages the library never sees — and declares the failure half
// (acemq.dlx, <queue>.dlq, <queue>.parked and their bindings).
func DeadLetter() QueueOption {
	return queueFlag{flag{name: "DeadLetter", q: func(s *queueSpec) { s.deadLetter = true }}}
}

// Existing says the queue is declared elsewhere (by an operator, by
// another service), with settings that are its owner's: the topology uses
// it, and applying the topology checks that it exists (a passive declare)
// instead of declaring it. The printout shows it as "check queue <name>
// (declared elsewhere)". Given for a queue the topology derives (a .dlq
// with a length limit an operator set, say), it takes the derived
// declaration's place, whichever call comes first:
//
//	topology.New().
//		Queue("billing", topology.DeadLetter(), topology.Retry(policy)).
//		Queue("billing.dlq", topology.Existing())
//
// It takes no option that would declare the queue; [Retry] goes with it
// (the queue's failure half and rungs are declared, as for a consumer's).
func Existing() QueueOption {
	return queueFlag{flag{name: "Existing", q: func(s *queueSpec) { s.existing = true }}}
}

// Internal declares an exchange that clients cannot publish to directly,
// only other exchanges (default: off).
func Internal() ExchangeOption {
	return exchangeFlag{flag{name: "Internal", e: func(s *exchangeSpec) { s.internal = true }}}
}

type retryOption struct{ p retry.Policy }

// Retry gives the queue a retry policy: it declares the failure half (as
// [DeadLetter] does, without the x-dead-letter-* arguments on the queue
// itself) and, when the policy has broker rungs, acemq.retry, one rung queue
// per broker wait and the binding that brings an expired retry home. The
// consumer of the queue must run the same policy.
func Retry(p retry.Policy) QueueOption { return retryOption{p} }

func (o retryOption) applyQueue(s *queueSpec) { s.retry, s.hasRetry = o.p, true }
func (o retryOption) String() string          { return "Retry(" + o.p.String() + ")" }

// ArgsOption is [Args]: queues, exchanges and bindings all take it.
type ArgsOption interface {
	QueueOption
	ExchangeOption
	BindingOption
}

type argsOption struct{ t amqp.Table }

// Args adds broker arguments to a queue, an exchange or a binding (for a
// headers exchange, the binding's match table), e.g.
// Args(map[string]any{"x-max-length": 10000}). The map is copied; a nested
// map[string]any is sent as a nested table. A queue whose arguments name
// x-queue-type keeps that type (how streams are declared); giving
// [Quorum]() or [Classic]() as well is an error.
func Args(t map[string]any) ArgsOption { return argsOption{cloneTable(t)} }

func (o argsOption) applyQueue(s *queueSpec)       { s.args = mergeTable(s.args, o.t) }
func (o argsOption) applyExchange(s *exchangeSpec) { s.args = mergeTable(s.args, o.t) }
func (o argsOption) applyBinding(b *Binding)       { b.Args = mergeTable(b.Args, o.t) }
func (o argsOption) String() string                { return "Args(" + formatTable(o.t) + ")" }

func mergeTable(dst, src amqp.Table) amqp.Table {
	if len(src) == 0 {
		return dst
	}
	if dst == nil {
		dst = amqp.Table{}
	}
	for k, v := range src {
		dst[k] = cloneValue(v)
	}
	return dst
}

// cloneTable copies t deeply: nested tables, arrays and byte slices are
// copied too, so neither the caller's table nor one handed out by Queues()
// and the like shares anything with the topology. A nested plain
// map[string]any becomes an amqp.Table, the form amqp091 sends.
func cloneTable(t map[string]any) amqp.Table {
	if t == nil {
		return nil
	}
	c := make(amqp.Table, len(t))
	for k, v := range t {
		c[k] = cloneValue(v)
	}
	return c
}

func cloneValue(v any) any {
	switch x := v.(type) {
	case amqp.Table:
		return cloneTable(x)
	case map[string]any:
		return cloneTable(x)
	case []any:
		if x == nil {
			return x
		}
		c := make([]any, len(x))
		for i, e := range x {
			c[i] = cloneValue(e)
		}
		return c
	case []byte:
		return slices.Clone(x)
	default:
		return v
	}
}

func describeCall(method string, names []string, opts []fmt.Stringer) string {
	s := method + "("
	for i, n := range names {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("%q", n)
	}
	for _, o := range opts {
		if o == nil {
			s += ", <nil>"
			continue
		}
		s += ", " + o.String()
	}
	return s + ")"
}
