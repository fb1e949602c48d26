package conformance

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/acemq/acemq-go/topology"
)

// Call is one neutral builder call: call is exchange, queue, binding or
// consumer (the failure half a consumer of queue declares for itself).
type Call struct {
	Call string `json:"call"`
	Name string `json:"name,omitempty"`
	// exchange
	Kind     string `json:"kind,omitempty"`
	Internal bool   `json:"internal,omitempty"`
	// queue
	Type       string      `json:"type,omitempty"` // quorum or classic
	Exclusive  bool        `json:"exclusive,omitempty"`
	DeadLetter bool        `json:"dead_letter,omitempty"`
	Retry      *PolicySpec `json:"retry,omitempty"`
	// exchange and queue
	Durable    *bool `json:"durable,omitempty"` // default true
	AutoDelete bool  `json:"auto_delete,omitempty"`
	// binding and consumer
	Queue    string `json:"queue,omitempty"`
	Exchange string `json:"exchange,omitempty"`
	Key      string `json:"key"`
	// all three
	Arguments map[string]Typed `json:"arguments,omitempty"`
}

// Apply makes the call on tp, names taken as written (a broker run renames
// them first: integration's conformanceRenamed).
func (c Call) Apply(tp *topology.Topology) error {
	args, err := DecodeTable(c.Arguments, nil)
	if err != nil {
		return fmt.Errorf("%s %s: arguments: %w", c.Call, c.Name, err)
	}
	transient := c.Durable != nil && !*c.Durable
	switch c.Call {
	case "exchange":
		var opts []topology.ExchangeOption
		if c.Kind != "" {
			opts = append(opts, topology.Kind(c.Kind))
		}
		if transient {
			opts = append(opts, topology.Transient())
		}
		if c.AutoDelete {
			opts = append(opts, topology.AutoDelete())
		}
		if c.Internal {
			opts = append(opts, topology.Internal())
		}
		if args != nil {
			opts = append(opts, topology.Args(args))
		}
		tp.Exchange(c.Name, opts...)
	case "queue":
		var opts []topology.QueueOption
		switch c.Type {
		case "":
		case "quorum":
			opts = append(opts, topology.Quorum())
		case "classic":
			opts = append(opts, topology.Classic())
		default:
			return fmt.Errorf("queue %s: unknown type %q (quorum or classic)", c.Name, c.Type)
		}
		if transient {
			opts = append(opts, topology.Transient())
		}
		if c.Exclusive {
			opts = append(opts, topology.Exclusive())
		}
		if c.AutoDelete {
			opts = append(opts, topology.AutoDelete())
		}
		if c.DeadLetter {
			opts = append(opts, topology.DeadLetter())
		}
		if c.Retry != nil {
			p, err := c.Retry.Policy()
			if err != nil {
				return fmt.Errorf("queue %s: %w", c.Name, err)
			}
			opts = append(opts, topology.Retry(p))
		}
		if args != nil {
			opts = append(opts, topology.Args(args))
		}
		tp.Queue(c.Name, opts...)
	case "binding":
		var opts []topology.BindingOption
		if args != nil {
			opts = append(opts, topology.Args(args))
		}
		tp.Binding(c.Queue, c.Exchange, c.Key, opts...)
	case "consumer":
		if c.Retry == nil {
			return fmt.Errorf("consumer %s: no retry policy", c.Queue)
		}
		p, err := c.Retry.Policy()
		if err != nil {
			return fmt.Errorf("consumer %s: %w", c.Queue, err)
		}
		tp.Merge(topology.ForConsumer(c.Queue, p))
	default:
		return fmt.Errorf("unknown call %q", c.Call)
	}
	return nil
}

// Build makes every call on a new topology.
func Build(calls []Call) (*topology.Topology, error) {
	tp := topology.New()
	for i, c := range calls {
		if err := c.Apply(tp); err != nil {
			return nil, fmt.Errorf("call %d: %w", i, err)
		}
	}
	return tp, nil
}

// QueueSpec is a queue as the broker must store it.
type QueueSpec struct {
	Name       string           `json:"name"`
	Durable    bool             `json:"durable"`
	Exclusive  bool             `json:"exclusive"`
	AutoDelete bool             `json:"auto_delete"`
	Arguments  map[string]Typed `json:"arguments"`
}

// TopologyVector is one entry of topologies.json.
type TopologyVector struct {
	Name string `json:"name"`
	// DeclareOnBroker false keeps a vector off the broker run (a queue
	// RabbitMQ 4.3 refuses, say); WhyNotOnBroker says why. Default true.
	DeclareOnBroker *bool       `json:"declare_on_broker,omitempty"`
	WhyNotOnBroker  string      `json:"why_not_on_broker,omitempty"`
	Calls           []Call      `json:"calls"`
	Printout        []string    `json:"printout"`
	Queues          []QueueSpec `json:"queues"`
}

// OnBroker reports whether the broker run declares this vector.
func (v TopologyVector) OnBroker() bool { return v.DeclareOnBroker == nil || *v.DeclareOnBroker }

// Topologies is topologies.json.
type Topologies struct {
	About      string           `json:"about"`
	Topologies []TopologyVector `json:"topologies"`
}

// CheckTopologies builds each topology and compares its printout, line for
// line, and every queue it declares — name, order, flags, and each
// argument's AMQP type and value — with the vector.
func CheckTopologies(v Topologies) []string {
	var out []string
	if len(v.Topologies) == 0 {
		return []string{"topologies: the vector has no topologies"}
	}
	for _, tv := range v.Topologies {
		out = append(out, CheckTopology(tv)...)
	}
	return out
}

// CheckTopology runs one topology vector.
func CheckTopology(tv TopologyVector) []string {
	var out []string
	fail := func(format string, args ...any) {
		out = append(out, fmt.Sprintf("topology %q: ", tv.Name)+fmt.Sprintf(format, args...))
	}
	tp, err := Build(tv.Calls)
	if err != nil {
		fail("%v", err)
		return out
	}
	if err := tp.Validate(); err != nil {
		fail("refused: %v", err)
		return out
	}
	got := strings.Split(strings.TrimSuffix(tp.String(), "\n"), "\n")
	if !slices.Equal(got, tv.Printout) {
		for i := range max(len(got), len(tv.Printout)) {
			g, w := "(none)", "(none)"
			if i < len(got) {
				g = got[i]
			}
			if i < len(tv.Printout) {
				w = tv.Printout[i]
			}
			if g != w {
				fail("printout line %d is\n\t%s\nthe vector says\n\t%s", i+1, g, w)
				break
			}
		}
	}
	qs := tp.Queues()
	if len(qs) != len(tv.Queues) {
		fail("%d queues declared, the vector lists %d", len(qs), len(tv.Queues))
	}
	for i := range min(len(qs), len(tv.Queues)) {
		q, w := qs[i], tv.Queues[i]
		if q.Name != w.Name {
			fail("queue %d is %s, the vector says %s", i+1, q.Name, w.Name)
			continue
		}
		if q.Durable != w.Durable || q.Exclusive != w.Exclusive || q.AutoDelete != w.AutoDelete {
			fail("queue %s: durable %v exclusive %v auto-delete %v, the vector says %v %v %v",
				q.Name, q.Durable, q.Exclusive, q.AutoDelete, w.Durable, w.Exclusive, w.AutoDelete)
		}
		want, err := DecodeTable(w.Arguments, nil)
		if err != nil {
			fail("queue %s: %v", q.Name, err)
			continue
		}
		if g, wt := CanonTable(q.Args), CanonTable(want); g != wt {
			fail("queue %s: arguments\n\t%s\nthe vector says\n\t%s", q.Name, g, wt)
		}
	}
	return out
}

// ValidationVector is one entry of validation.json: calls of which the one
// at index Refused is wrong.
type ValidationVector struct {
	Name    string `json:"name"`
	Rule    string `json:"rule"`
	Calls   []Call `json:"calls"`
	Refused int    `json:"refused"`
}

// Validation is validation.json.
type Validation struct {
	About   string             `json:"about"`
	Refused []ValidationVector `json:"refused"`
	// Accepted are topologies at the edge of a rule that must validate.
	Accepted []struct {
		Name  string `json:"name"`
		Calls []Call `json:"calls"`
	} `json:"accepted"`
}

// CheckValidation makes the calls one at a time: the topology must be
// valid up to the refused call, refused once it is made, and every mistake
// in the end must name the refused call (whose Go spelling the runner learns
// from the mistakes that appeared with it).
func CheckValidation(v Validation) []string {
	var out []string
	if len(v.Refused) == 0 {
		return []string{"validation: the vector has no cases"}
	}
	for _, c := range v.Refused {
		out = append(out, checkRefused(c)...)
	}
	if len(v.Accepted) == 0 {
		out = append(out, "validation: the vector has no accepted cases")
	}
	for _, c := range v.Accepted {
		tp, err := Build(c.Calls)
		if err == nil {
			err = tp.Validate()
		}
		if err != nil {
			out = append(out, fmt.Sprintf("validation %q: refused, the vector says it is accepted: %v", c.Name, err))
		}
	}
	return out
}

func checkRefused(c ValidationVector) []string {
	var out []string
	fail := func(format string, args ...any) {
		out = append(out, fmt.Sprintf("validation %q (%s): ", c.Name, c.Rule)+fmt.Sprintf(format, args...))
	}
	if c.Refused < 0 || c.Refused >= len(c.Calls) {
		fail("refused is %d, the vector has %d calls", c.Refused, len(c.Calls))
		return out
	}
	tp := topology.New()
	var named map[string]bool
	for i, call := range c.Calls {
		if err := call.Apply(tp); err != nil {
			fail("call %d: %v", i, err)
			return out
		}
		calls := errorCalls(tp.Validate())
		switch {
		case i < c.Refused && len(calls) > 0:
			fail("refused at call %d already, before the vector's call %d: %v", i, c.Refused, tp.Validate())
			return out
		case i == c.Refused:
			if len(calls) == 0 {
				fail("call %d is accepted", i)
				return out
			}
			named = calls
		}
	}
	err := tp.Validate()
	if !errors.Is(err, topology.ErrInvalid) {
		fail("Validate() = %v, not a topology.ErrInvalid", err)
	}
	for call := range errorCalls(err) {
		if !named[call] {
			fail("a mistake names %s, which is not the refused call", call)
		}
	}
	if plan, perr := tp.Plan(); plan != nil || perr == nil {
		fail("Plan() = %v, %v: an invalid topology has no plan", plan, perr)
	}
	return out
}

// errorCalls is the set of builder calls Validate's mistakes name.
func errorCalls(err error) map[string]bool {
	if err == nil {
		return nil
	}
	var errs []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	} else {
		errs = []error{err}
	}
	out := map[string]bool{}
	for _, e := range errs {
		var te *topology.Error
		if errors.As(e, &te) {
			out[te.Call] = true
		} else {
			out["(not a *topology.Error: "+e.Error()+")"] = true
		}
	}
	return out
}
