package topology

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/retry"
)

// MaxNameLength is the longest exchange name, queue name or routing key
// AMQP 0-9-1 can carry (a short string), in bytes.
const MaxNameLength = 255

// ErrInvalid is matched (errors.Is) by every error Validate returns.
var ErrInvalid = errors.New("topology: invalid")

// Error is one mistake in a topology, naming the builder call that made it.
type Error struct {
	// Call is the builder call that was wrong, e.g.
	// Queue("orders", Quorum(), Exclusive()).
	Call string
	// Problem says what is wrong with it.
	Problem string
}

func (e *Error) Error() string { return "topology: " + e.Call + ": " + e.Problem }

// Unwrap makes errors.Is(err, [ErrInvalid]) true.
func (e *Error) Unwrap() error { return ErrInvalid }

// Exchange is an exchange as it will be declared.
type Exchange struct {
	Name       string
	Kind       Kind
	Durable    bool
	AutoDelete bool
	Internal   bool
	Args       amqp.Table
}

// Queue is a queue as it will be declared, with its derived arguments.
type Queue struct {
	Name       string
	Durable    bool
	Exclusive  bool
	AutoDelete bool
	Args       amqp.Table
	// DeadLetter and Retry are what the queue was declared with; a derived
	// queue (.dlq, .parked, a rung) has neither. HasRetry says whether
	// Retry was given at all: a one-attempt policy (retry.Fixed(1, …), no
	// retries) is a policy, and equals the zero Policy.
	DeadLetter bool
	Retry      retry.Policy
	HasRetry   bool
	// Existing says the queue is declared elsewhere ([Existing]): applying
	// the topology checks that it exists (a passive declare) and declares
	// nothing. Its flags and arguments are then zero: they are its owner's.
	Existing bool
}

// Binding binds a queue to an exchange on a routing key.
type Binding struct {
	Queue    string
	Exchange string
	Key      string
	Args     amqp.Table
}

type exchangeSpec struct {
	kinds                           []Kind
	transient, autoDelete, internal bool
	args                            amqp.Table
}

type queueSpec struct {
	transient, autoDelete, exclusive bool
	quorum, classic, deadLetter      bool
	hasRetry, existing               bool
	retry                            retry.Policy
	args                             amqp.Table
}

type item[T any] struct {
	v       T
	call    string
	derived bool // a queue the failure half of another derived
}

// Topology is a description of exchanges, queues and bindings. Build one with
// [New] and its chainable methods; the order of calls does not matter, since
// applying declares exchanges, then queues, then bindings, each group in the
// order the topology first met its items. The zero Topology is empty and
// ready to use, like New(). A Topology is not safe for concurrent mutation.
type Topology struct {
	exchanges []item[Exchange]
	queues    []item[Queue]
	bindings  []item[Binding]
	exIdx     map[string]int
	qIdx      map[string]int
	bIdx      map[string]int
	external  map[string]string // queue → call: used, declared by somebody else
	refused   map[string]bool   // names whose own declaration was refused
	errs      []error
	calls     []func(*Topology) // replayed by Merge
}

// New returns an empty topology.
func New() *Topology {
	t := &Topology{}
	t.init()
	return t
}

// init makes the zero Topology usable: every mutating path calls it first.
func (t *Topology) init() {
	if t.exIdx == nil {
		t.exIdx, t.qIdx, t.bIdx = map[string]int{}, map[string]int{}, map[string]int{}
		t.external, t.refused = map[string]string{}, map[string]bool{}
	}
}

func (t *Topology) fail(call, format string, args ...any) {
	t.errs = append(t.errs, &Error{Call: call, Problem: fmt.Sprintf(format, args...)})
}

func stringers[T fmt.Stringer](opts []T) []fmt.Stringer {
	out := make([]fmt.Stringer, len(opts))
	for i, o := range opts {
		if reflect.ValueOf(&o).Elem().IsNil() {
			continue
		}
		out[i] = o
	}
	return out
}

// Exchange declares an exchange. Without a [Kind] option it is a topic
// exchange; it is durable unless [Transient]() is given.
func (t *Topology) Exchange(name string, opts ...ExchangeOption) *Topology {
	opts = slices.Clone(opts)
	t.calls = append(t.calls, func(t *Topology) { t.exchange(name, opts) })
	t.exchange(name, opts)
	return t
}

func (t *Topology) exchange(name string, opts []ExchangeOption) {
	t.init()
	call := describeCall("Exchange", []string{name}, stringers(opts))
	var s exchangeSpec
	for _, o := range opts {
		if o == nil || reflect.ValueOf(&o).Elem().IsNil() {
			t.fail(call, "an option is nil")
			continue
		}
		o.applyExchange(&s)
	}
	ok := t.checkName(call, "exchange", name)
	kind := Topic
	if len(s.kinds) > 0 {
		kind = s.kinds[0]
	}
	if len(s.kinds) > 1 {
		t.fail(call, "more than one exchange kind given")
		ok = false
	}
	for _, k := range s.kinds {
		if !k.known() {
			t.fail(call, "unknown exchange kind %q (want direct, topic, fanout or headers)", string(k))
			ok = false
		}
	}
	if !t.checkArgs(call, s.args) {
		ok = false
	}
	if !ok {
		t.refused["e\x00"+name] = true
		return
	}
	t.addExchange(call, Exchange{Name: name, Kind: kind, Durable: !s.transient, AutoDelete: s.autoDelete, Internal: s.internal, Args: s.args})
}

// Queue declares a queue. It is durable and a quorum queue unless told
// otherwise; see the options for the rules. [DeadLetter]() and [Retry](...)
// derive the queues and bindings a consumer needs to fail into.
func (t *Topology) Queue(name string, opts ...QueueOption) *Topology {
	opts = slices.Clone(opts)
	t.calls = append(t.calls, func(t *Topology) { t.queue(name, opts) })
	t.queue(name, opts)
	return t
}

func (t *Topology) queue(name string, opts []QueueOption) {
	t.init()
	call := describeCall("Queue", []string{name}, stringers(opts))
	var s queueSpec
	for _, o := range opts {
		if o == nil || reflect.ValueOf(&o).Elem().IsNil() {
			t.fail(call, "an option is nil")
			continue
		}
		o.applyQueue(&s)
	}
	ok := t.checkName(call, "queue", name)
	if !t.checkArgs(call, s.args) {
		ok = false
	}
	q := Queue{Name: name, Durable: !s.transient, Exclusive: s.exclusive, AutoDelete: s.autoDelete,
		DeadLetter: s.deadLetter, Retry: s.retry, HasRetry: s.hasRetry}
	args := cloneTable(s.args)
	owned := s.exclusive || s.autoDelete || s.transient
	typ, named := args[ArgQueueType]
	switch {
	case s.quorum && s.classic:
		t.fail(call, "Quorum() and Classic() both given")
		ok = false
	case named && (s.quorum || s.classic):
		t.fail(call, "x-queue-type is in Args and Quorum() or Classic() is given as well: say the type once")
		ok = false
	case named && typ == "classic":
		t.fail(call, "x-queue-type='classic' is not how a classic queue is declared: give Classic(), which leaves x-queue-type off")
		ok = false
	case named && typ != QueueTypeQuorum && typ != "stream":
		t.fail(call, "x-queue-type %s is not a queue type this library declares (quorum or stream)", formatValue(typ))
		ok = false
	case s.quorum && owned:
		t.fail(call, "a quorum queue cannot be exclusive, auto-delete or transient")
		ok = false
	case named && owned:
		t.fail(call, "an x-queue-type=%s queue cannot be exclusive, auto-delete or transient", formatValue(typ))
		ok = false
	case !named && !s.classic && !owned:
		if args == nil {
			args = amqp.Table{}
		}
		args[ArgQueueType] = QueueTypeQuorum
	}
	if s.deadLetter {
		for k := range DeadLetterArguments(name) {
			if _, dup := args[k]; dup {
				t.fail(call, "DeadLetter() and Args(%s=…) both set the dead-letter route", k)
				ok = false
			}
		}
		args = mergeTable(args, DeadLetterArguments(name))
	}
	if s.hasRetry {
		if err := s.retry.Validate(); err != nil {
			t.fail(call, "%v", err)
			ok = false
		}
	}
	q.Args = args
	if s.existing {
		if s.transient || s.autoDelete || s.exclusive || s.quorum || s.classic || s.deadLetter || len(s.args) > 0 {
			t.fail(call, "Existing() says the queue is declared elsewhere, so its flags and arguments are its owner's: give it no option that declares it (only Retry(…) goes with it)")
			ok = false
		}
		q = Queue{Name: name, Retry: s.retry, HasRetry: s.hasRetry, Existing: true}
	}
	if !ok {
		t.refused["q\x00"+name] = true
		return
	}
	if !t.addQueue(call, q, false) {
		return
	}
	if s.deadLetter || s.hasRetry {
		t.failureHalf(call, name, s.retry)
	}
}

// failureHalf adds what a queue needs to fail into: acemq.dlx, q.dlq,
// q.parked and their bindings; and for a policy with broker rungs,
// acemq.retry, one rung per broker wait and the home binding.
func (t *Topology) failureHalf(call, q string, p retry.Policy) {
	derived := []string{DeadLetterQueue(q), ParkedQueue(q)}
	rungs := p.BrokerRungs()
	for _, d := range rungs {
		derived = append(derived, Rung(q, p, d).Name)
	}
	for _, n := range derived {
		switch {
		case len(n) > MaxNameLength:
			t.fail(call, "derived queue name %q is over %d bytes", truncate(n), MaxNameLength)
			return
		case strings.HasPrefix(n, "amq."):
			t.fail(call, "derived queue name %q starts with amq., which the broker reserves", n)
			return
		}
	}
	t.addExchange(call, Exchange{Name: DeadLetterExchange, Kind: Direct, Durable: true})
	if len(rungs) > 0 {
		t.addExchange(call, Exchange{Name: RetryExchange, Kind: Direct, Durable: true})
	}
	t.addQueue(call, Queue{Name: DeadLetterQueue(q), Durable: true}, true)
	t.addQueue(call, Queue{Name: ParkedQueue(q), Durable: true}, true)
	for _, d := range rungs {
		t.addQueue(call, Rung(q, p, d), true)
	}
	t.addBinding(call, Binding{Queue: DeadLetterQueue(q), Exchange: DeadLetterExchange, Key: DeadLetterQueue(q)})
	t.addBinding(call, Binding{Queue: ParkedQueue(q), Exchange: DeadLetterExchange, Key: ParkedQueue(q)})
	if len(rungs) > 0 {
		t.addBinding(call, Binding{Queue: q, Exchange: RetryExchange, Key: q})
	}
}

// Binding binds queue to exchange on key. Both must be declared by this
// topology (or by a fragment merged into it). For a headers exchange, give
// the match table with [Args].
func (t *Topology) Binding(queue, exchange, key string, opts ...BindingOption) *Topology {
	opts = slices.Clone(opts)
	t.calls = append(t.calls, func(t *Topology) { t.binding(queue, exchange, key, opts) })
	t.binding(queue, exchange, key, opts)
	return t
}

func (t *Topology) binding(queue, exchange, key string, opts []BindingOption) {
	t.init()
	call := describeCall("Binding", []string{queue, exchange, key}, stringers(opts))
	b := Binding{Queue: queue, Exchange: exchange, Key: key}
	for _, o := range opts {
		if o == nil || reflect.ValueOf(&o).Elem().IsNil() {
			t.fail(call, "an option is nil")
			continue
		}
		o.applyBinding(&b)
	}
	ok := t.checkName(call, "queue", queue)
	if !t.checkName(call, "exchange", exchange) {
		ok = false
	}
	if len(key) > MaxNameLength {
		t.fail(call, "routing key is over %d bytes", MaxNameLength)
		ok = false
	}
	if !t.checkArgs(call, b.Args) {
		ok = false
	}
	if ok {
		t.addBinding(call, b)
	}
}

// ForConsumer is the failure half a consumer of queue declares for itself
// when it starts (docs/contract.md, "Who declares what"): acemq.dlx, queue.dlq, queue.parked and their
// bindings, and when p has broker rungs, acemq.retry, the rungs and the home
// binding. It never declares queue itself: its type and arguments belong to
// whoever set the service up.
func ForConsumer(queue string, p retry.Policy) *Topology {
	t := New()
	t.calls = append(t.calls, func(t *Topology) { t.forConsumer(queue, p) })
	t.forConsumer(queue, p)
	return t
}

func (t *Topology) forConsumer(queue string, p retry.Policy) {
	t.init()
	call := fmt.Sprintf("ForConsumer(%q, %s)", queue, p)
	ok := t.checkName(call, "queue", queue)
	if err := p.Validate(); err != nil {
		t.fail(call, "%v", err)
		ok = false
	}
	if !ok {
		return
	}
	if _, seen := t.external[queue]; !seen {
		t.external[queue] = call
	}
	t.failureHalf(call, queue, p)
}

// Merge adds everything the other topologies declare to t, as if their
// calls had been made on t, and returns t. Several modules can each
// contribute a fragment of one service's topology this way. The same item
// merged twice is declared once; two different definitions of one name are a
// validation error.
func (t *Topology) Merge(others ...*Topology) *Topology {
	for _, o := range others {
		if o == nil || o == t {
			continue
		}
		for _, c := range o.calls {
			t.calls = append(t.calls, c)
			c(t)
		}
	}
	return t
}

func (t *Topology) addExchange(call string, e Exchange) {
	if i, ok := t.exIdx[e.Name]; ok {
		if prev := t.exchanges[i]; !sameExchange(prev.v, e) {
			t.fail(call, "exchange %q is already declared differently by %s as (%s); this call declares it as (%s)", e.Name, prev.call, exchangeDetail(prev.v), exchangeDetail(e))
		}
		return
	}
	t.exIdx[e.Name] = len(t.exchanges)
	t.exchanges = append(t.exchanges, item[Exchange]{v: e, call: call})
}

// addQueue adds q, met in call; derived: q is part of another queue's
// failure half. A queue marked Existing takes the place of a derived
// declaration of the same name, whichever comes first.
func (t *Topology) addQueue(call string, q Queue, derived bool) bool {
	if i, ok := t.qIdx[q.Name]; ok {
		prev := t.queues[i]
		switch {
		case prev.v.Existing && derived:
			return true // declared elsewhere: not declared here
		case q.Existing && prev.derived:
			t.queues[i] = item[Queue]{q, call, false}
			return true
		case q.Existing != prev.v.Existing:
			declares, marks := prev.call, call
			if prev.v.Existing {
				declares, marks = call, prev.call
			}
			t.fail(call, "queue %q is declared by %s and marked Existing() (declared elsewhere) by %s: say one", q.Name, declares, marks)
			return false
		}
		if !sameQueue(prev.v, q) {
			t.fail(call, "queue %q is already declared differently by %s as (%s); this call declares it as (%s)", q.Name, prev.call, queueSummary(prev.v), queueSummary(q))
			return false
		}
		return true
	}
	t.qIdx[q.Name] = len(t.queues)
	t.queues = append(t.queues, item[Queue]{q, call, derived})
	return true
}

func (t *Topology) addBinding(call string, b Binding) {
	k := b.Queue + "\x00" + b.Exchange + "\x00" + b.Key + "\x00" + formatTable(b.Args)
	if _, ok := t.bIdx[k]; ok {
		return
	}
	t.bIdx[k] = len(t.bindings)
	t.bindings = append(t.bindings, item[Binding]{v: b, call: call})
}

func (t *Topology) checkName(call, what, name string) bool {
	switch {
	case name == "":
		t.fail(call, "%s name is empty", what)
	case len(name) > MaxNameLength:
		t.fail(call, "%s name is over %d bytes", what, MaxNameLength)
	case strings.HasPrefix(name, "amq."):
		t.fail(call, "%s name %q starts with amq., which the broker reserves", what, name)
	default:
		return true
	}
	return false
}

// integerArgs are arguments the broker reads as integers; a float or a
// string there is a different argument (and a PRECONDITION_FAILED to find).
var integerArgs = []string{"x-message-ttl", "x-expires", "x-max-length", "x-max-length-bytes",
	"x-max-priority", "x-delivery-limit", "x-quorum-initial-group-size"}

func (t *Topology) checkArgs(call string, args amqp.Table) bool {
	if len(args) == 0 {
		return true
	}
	ok := true
	if err := args.Validate(); err != nil {
		t.fail(call, "arguments: %v", err)
		ok = false
	}
	for k, v := range args {
		if k == "" || len(k) > MaxNameLength {
			t.fail(call, "argument name %q is empty or over %d bytes", truncate(k), MaxNameLength)
			ok = false
		}
		if i, big := bigInt(v); big {
			t.fail(call, "argument %s holds %d, which does not fit the 32 bits a Go int is sent as; use int64", k, i)
			ok = false
		}
	}
	for _, k := range integerArgs {
		v, present := args[k]
		if !present {
			continue
		}
		switch v.(type) {
		case int, int8, int16, int32, int64, uint8, uint16, uint32:
		default:
			t.fail(call, "argument %s must be an integer, not %T", k, v)
			ok = false
		}
	}
	return ok
}

// bigInt finds a Go int, at any depth of v, that amqp091 would send
// truncated to 32 bits.
func bigInt(v any) (int, bool) {
	switch x := v.(type) {
	case int:
		return x, int64(x) != int64(int32(x))
	case amqp.Table:
		for _, e := range x {
			if i, big := bigInt(e); big {
				return i, true
			}
		}
	case []any:
		for _, e := range x {
			if i, big := bigInt(e); big {
				return i, true
			}
		}
	}
	return 0, false
}

func truncate(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

func sameExchange(a, b Exchange) bool {
	return a.Kind == b.Kind && a.Durable == b.Durable && a.AutoDelete == b.AutoDelete &&
		a.Internal == b.Internal && formatTable(a.Args) == formatTable(b.Args)
}

func sameQueue(a, b Queue) bool {
	return a.Durable == b.Durable && a.Exclusive == b.Exclusive && a.AutoDelete == b.AutoDelete &&
		formatTable(a.Args) == formatTable(b.Args) && a.DeadLetter == b.DeadLetter && a.HasRetry == b.HasRetry && a.Retry.Equal(b.Retry)
}

func queueSummary(q Queue) string {
	s := queueDetail(q)
	if q.HasRetry {
		s += ", retry " + q.Retry.String()
	}
	if s == "" {
		return "no flags"
	}
	return s
}

// Validate returns every mistake in the topology at once (errors.Join of
// *[Error] values, each wrapping [ErrInvalid]), or nil. Besides the mistakes
// recorded by each call, it checks that every binding names a queue and an
// exchange this topology declares.
func (t *Topology) Validate() error {
	errs := slices.Clone(t.errs)
	for _, b := range t.bindings {
		if _, ok := t.qIdx[b.v.Queue]; !ok && !t.refused["q\x00"+b.v.Queue] {
			if _, ext := t.external[b.v.Queue]; !ext {
				errs = append(errs, &Error{Call: b.call, Problem: fmt.Sprintf("queue %q is not declared by this topology", b.v.Queue)})
			}
		}
		if _, ok := t.exIdx[b.v.Exchange]; !ok && !t.refused["e\x00"+b.v.Exchange] {
			errs = append(errs, &Error{Call: b.call, Problem: fmt.Sprintf("exchange %q is not declared by this topology", b.v.Exchange)})
		}
	}
	return errors.Join(errs...)
}

// Exchanges lists the exchanges to declare, in order.
func (t *Topology) Exchanges() []Exchange { return values(t.exchanges, cloneExchange) }

// Queues lists the queues to declare, in order.
func (t *Topology) Queues() []Queue { return values(t.queues, cloneQueue) }

// Bindings lists the bindings to declare, in order.
func (t *Topology) Bindings() []Binding { return values(t.bindings, cloneBinding) }

// QueueNamed returns the declaration of the named queue, if this topology
// declares it.
func (t *Topology) QueueNamed(name string) (Queue, bool) {
	i, ok := t.qIdx[name]
	if !ok {
		return Queue{}, false
	}
	return cloneQueue(t.queues[i].v), true
}

func values[T any](items []item[T], clone func(T) T) []T {
	out := make([]T, len(items))
	for i, it := range items {
		out[i] = clone(it.v)
	}
	return out
}

func cloneExchange(e Exchange) Exchange { e.Args = cloneTable(e.Args); return e }
func cloneQueue(q Queue) Queue          { q.Args = cloneTable(q.Args); return q }
func cloneBinding(b Binding) Binding    { b.Args = cloneTable(b.Args); return b }
