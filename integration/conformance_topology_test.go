//go:build integration

package integration

// Issue 15: conformance/topologies.json against the broker. Each topology
// is declared with goit.* names; then what the broker stores for every
// queue is compared with the vector two ways: rabbitmqctl's listing (the
// flags, and exactly the argument keys with their values — nothing extra
// anywhere but what the broker itself adds to every classic queue declared
// without x-queue-type, which a probe queue shows and brokerClassicAdds
// pins per version), and a
// redeclaration with the vector's own table, typed as the vector says, which
// the broker accepts only if it is equivalent to what it stores (a float
// where it stores an integer is PRECONDITION_FAILED).

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/internal/conformance"
	"github.com/acemq/acemq-go/internal/testenv"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/retry"
	"github.com/acemq/acemq-go/topology"
)

// storedQueue is one queue as `rabbitmqctl list_queues --formatter json`
// reports it: each argument as [key, AMQP type, value], in RabbitMQ's names
// for the types, which are the vectors' names.
type storedQueue struct {
	Name       string              `json:"name"`
	Durable    bool                `json:"durable"`
	AutoDelete bool                `json:"auto_delete"`
	Exclusive  json.RawMessage     `json:"exclusive"` // false, true, or "" for a quorum queue
	Arguments  [][]json.RawMessage `json:"arguments"`
}

func listStored(t *testing.T, prefix string) map[string]storedQueue {
	t.Helper()
	out, err := testenv.Rabbitmqctl(testenv.Context(t, 60*time.Second), "", "list_queues", "name", "durable", "auto_delete", "exclusive", "arguments", "--formatter", "json")
	if err != nil {
		t.Fatal(err)
	}
	var qs []storedQueue
	if err := json.Unmarshal([]byte(out), &qs); err != nil {
		t.Fatalf("rabbitmqctl list_queues: %v\n%s", err, out)
	}
	m := map[string]storedQueue{}
	for _, q := range qs {
		if strings.HasPrefix(q.Name, prefix) {
			m[q.Name] = q
		}
	}
	return m
}

// args is the stored arguments as key → canonical typed value (Canon's
// spelling: long(40000), longstr("acemq.dlx"), …).
func (q storedQueue) args() (map[string]string, error) {
	out := map[string]string{}
	for _, a := range q.Arguments {
		if len(a) != 3 {
			return nil, fmt.Errorf("argument %s is not [key, type, value]", a)
		}
		var k, typ string
		if err := json.Unmarshal(a[0], &k); err != nil {
			return nil, err
		}
		if err := json.Unmarshal(a[1], &typ); err != nil {
			return nil, err
		}
		c, err := storedCanon(typ, a[2])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", k, err)
		}
		out[k] = c
	}
	return out, nil
}

// storedCanon turns one stored [type, value] into Canon's spelling, by
// way of the vector decoder: {"<type>": value} is exactly a typed vector
// value, but for tables and arrays, which rabbitmqctl lists as
// [[key, type, value], …] and [[type, value], …].
func storedCanon(typ string, raw json.RawMessage) (string, error) {
	switch typ {
	case "table":
		var rows [][]json.RawMessage
		if err := json.Unmarshal(raw, &rows); err != nil {
			return "", fmt.Errorf("table %s: %w", raw, err)
		}
		t := amqp.Table{}
		parts := map[string]string{}
		for _, r := range rows {
			var k, et string
			if len(r) != 3 || json.Unmarshal(r[0], &k) != nil || json.Unmarshal(r[1], &et) != nil {
				return "", fmt.Errorf("table row %s", r)
			}
			c, err := storedCanon(et, r[2])
			if err != nil {
				return "", err
			}
			parts[k] = c
			t[k] = nil
		}
		keys := make([]string, 0, len(parts))
		for k := range parts {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for i, k := range keys {
			keys[i] = k + ": " + parts[k]
		}
		return "table{" + strings.Join(keys, ", ") + "}", nil
	case "array":
		rows, err := storedArray(raw)
		if err != nil {
			return "", fmt.Errorf("array %s: %w", raw, err)
		}
		parts := make([]string, len(rows))
		for i, r := range rows {
			var et string
			if len(r) != 2 || json.Unmarshal(r[0], &et) != nil {
				return "", fmt.Errorf("array element %s", r)
			}
			c, err := storedCanon(et, r[1])
			if err != nil {
				return "", err
			}
			parts[i] = c
		}
		return "array[" + strings.Join(parts, ", ") + "]", nil
	case "void":
		return "void", nil
	}
	v, err := conformance.Decode(json.RawMessage(fmt.Sprintf(`{%q: %s}`, typ, raw)), nil)
	if err != nil {
		return "", err
	}
	return conformance.Canon(v), nil
}

// conformanceRenamed gives every name a vector declares the test's own
// prefix (the contract's shared exchanges acemq.* excepted), in the calls
// and in the expected queues, argument values naming a queue included.
func conformanceRenamed(tv conformance.TopologyVector, prefix string) conformance.TopologyVector {
	names := map[string]bool{}
	for _, c := range tv.Calls {
		for _, n := range []string{c.Name, c.Queue, c.Exchange} {
			if n != "" {
				names[n] = true
			}
		}
	}
	for _, q := range tv.Queues {
		names[q.Name] = true
	}
	re := func(n string) string {
		if !names[n] || strings.HasPrefix(n, "acemq.") {
			return n
		}
		return prefix + n
	}
	out := tv
	out.Calls = make([]conformance.Call, len(tv.Calls))
	for i, c := range tv.Calls {
		c.Name, c.Queue, c.Exchange = re(c.Name), re(c.Queue), re(c.Exchange)
		out.Calls[i] = c
	}
	out.Queues = make([]conformance.QueueSpec, len(tv.Queues))
	for i, q := range tv.Queues {
		q.Name = re(q.Name)
		args := map[string]conformance.Typed{}
		for k, raw := range q.Arguments {
			if conformance.TypeName(raw) == "longstr" {
				if v, err := conformance.Decode(raw, nil); err == nil && names[v.(string)] {
					b, _ := json.Marshal(map[string]string{"longstr": re(v.(string))})
					raw = b
				}
			}
			args[k] = raw
		}
		q.Arguments = args
		out.Queues[i] = q
	}
	return out
}

// storedArray reads an array as rabbitmqctl lists it: [[type, value], …],
// or, as its JSON formatter writes it, an object {type: value, …} whose
// keys (in order, repeats kept) are the elements' types.
func storedArray(raw json.RawMessage) ([][]json.RawMessage, error) {
	var rows [][]json.RawMessage
	if err := json.Unmarshal(raw, &rows); err == nil {
		return rows, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, fmt.Errorf("neither [[type, value], …] nor {type: value, …}")
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		typ, _ := json.Marshal(tok)
		rows = append(rows, []json.RawMessage{typ, v})
	}
	return rows, nil
}

// brokerClassicAdds is what a broker of version v stores, unasked, on a
// classic queue declared without x-queue-type: RabbitMQ 4.x writes
// x-queue-type=classic into it (measured on 4.0.5 and 4.3.6); 3.10 stores
// nothing. Redeclaring such a queue with or without the argument is
// accepted by every version (TestConformanceStoredArgumentsCanFail). The
// probe queue of each test run must show exactly this.
func brokerClassicAdds(v testenv.Version) map[string]string {
	if v.AtLeast(4, 0) {
		return map[string]string{topology.ArgQueueType: conformance.Canon("classic")}
	}
	return map[string]string{}
}

// checkProbe compares what the broker stored on a classic queue declared
// with no arguments with what brokerClassicAdds says of its version.
func checkProbe(t *testing.T, probe storedQueue) map[string]string {
	t.Helper()
	got, err := probe.args()
	if err != nil {
		t.Fatalf("probe %s: %v", probe.Name, err)
	}
	v := testenv.BrokerVersion(t)
	if want := brokerClassicAdds(v); !maps.Equal(got, want) {
		t.Errorf("RabbitMQ %v stores %v on a classic queue declared without arguments; brokerClassicAdds says %v", v, got, want)
	}
	return got
}

func TestConformanceStoredArguments(t *testing.T) {
	testenv.NoLeaks(t)
	var v conformance.Topologies
	if err := conformance.Load("topologies.json", &v); err != nil {
		t.Fatal(err)
	}
	b := testenv.Broker(t, mq.Config{Logger: testenv.Logger(t)})
	ctx := testenv.Context(t, 60*time.Second)
	// Every topology is declared first, under a prefix of its own, and the
	// broker is listed once (rabbitmqctl takes about a second a call).
	run := testenv.Name(t) + "."
	type declared struct {
		tv              conformance.TopologyVector
		prefix          string
		queues, allDecl []string
	}
	var all []declared
	for i, tv := range v.Topologies {
		if !tv.OnBroker() {
			if tv.WhyNotOnBroker == "" {
				t.Errorf("topology %q is kept off the broker without a reason", tv.Name)
			}
			continue
		}
		prefix := fmt.Sprintf("%s%d.", run, i)
		tv := conformanceRenamed(tv, prefix)
		tp, err := conformance.Build(tv.Calls)
		if err != nil {
			t.Fatalf("%s: %v", tv.Name, err)
		}
		d := declared{tv: tv, prefix: prefix}
		var exchanges []string
		for _, q := range tp.Queues() {
			d.allDecl = append(d.allDecl, q.Name)
			if q.Exclusive {
				continue // only the declaring connection may delete it; it goes with that connection
			}
			d.queues = append(d.queues, q.Name)
		}
		for _, e := range tp.Exchanges() {
			if !strings.HasPrefix(e.Name, "acemq.") {
				exchanges = append(exchanges, e.Name)
			}
		}
		// A consumer's failure half binds the consumer's queue, which
		// somebody else declares: here, the test, as a classic queue.
		own := topology.New()
		for _, c := range tv.Calls {
			if c.Call == "consumer" {
				own.Queue(c.Queue, topology.Classic())
				d.queues = append(d.queues, c.Queue)
				d.allDecl = append(d.allDecl, c.Queue)
			}
		}
		// The exclusive queues go with b's connection, which testenv closes
		// before the cleanups below delete the rest.
		testenv.Cleanup(t, d.queues...)
		testenv.CleanupExchanges(t, exchanges...)
		if err := b.Declare(ctx, own.Merge(tp)); err != nil {
			t.Fatalf("%s: declare: %v", tv.Name, err)
		}
		all = append(all, d)
	}
	if len(all) == 0 {
		t.Fatal("no topology was declared")
	}
	probe := run + "probe"
	testenv.Cleanup(t, probe)
	if err := b.Declare(ctx, topology.New().Queue(probe, topology.Classic())); err != nil {
		t.Fatal(err)
	}
	listing := listStored(t, run)
	adds := checkProbe(t, listing[probe])
	for _, d := range all {
		t.Run(d.tv.Name, func(t *testing.T) {
			stored := map[string]storedQueue{}
			for name, q := range listing {
				if strings.HasPrefix(name, d.prefix) {
					stored[name] = q
				}
			}
			if len(stored) != len(d.allDecl) {
				t.Errorf("the broker has %d queues named %s*, the test declared %d", len(stored), d.prefix, len(d.allDecl))
			}
			for _, w := range d.tv.Queues {
				s, ok := stored[w.Name]
				if !ok {
					t.Errorf("queue %s is not on the broker", w.Name)
					continue
				}
				// RabbitMQ stores an exclusive queue as non-durable, whatever
				// the declaration said.
				exclusive := string(s.Exclusive) == "true"
				if s.Durable != (w.Durable && !w.Exclusive) || exclusive != w.Exclusive || s.AutoDelete != w.AutoDelete {
					t.Errorf("queue %s stored durable %v exclusive %v auto-delete %v; the vector declares %v %v %v",
						w.Name, s.Durable, exclusive, s.AutoDelete, w.Durable, w.Exclusive, w.AutoDelete)
				}
				want, err := conformance.DecodeTable(w.Arguments, nil)
				if err != nil {
					t.Fatal(err)
				}
				got, err := s.args()
				if err != nil {
					t.Fatalf("queue %s: %v", w.Name, err)
				}
				_, typed := want[topology.ArgQueueType]
				for k, c := range got {
					if _, ok := want[k]; !ok && (typed || adds[k] != c) {
						t.Errorf("queue %s: the broker stores %s=%s, which the vector does not list", w.Name, k, c)
					}
				}
				for k, wv := range want {
					if c, ok := got[k]; !ok {
						t.Errorf("queue %s: %s is not stored", w.Name, k)
					} else if c != conformance.Canon(wv) {
						t.Errorf("queue %s: the broker stores %s=%s, the vector says %s", w.Name, k, c, conformance.Canon(wv))
					}
				}
				if err := conformanceRedeclare(ctx, b, w, want); err != nil {
					t.Errorf("queue %s: redeclared with the vector's table %s: %v", w.Name, conformance.CanonTable(want), err)
				}
			}
		})
	}
}

// conformanceRedeclare declares q again, not passively, with the vector's
// flags and its table typed as the vector says: the broker answers
// PRECONDITION_FAILED unless that is equivalent to what it stores.
func conformanceRedeclare(ctx context.Context, b *mq.Broker, q conformance.QueueSpec, args amqp.Table) error {
	ch, err := b.Channel(ctx)
	if err != nil {
		return err
	}
	defer ch.Close()
	_, err = ch.QueueDeclare(q.Name, q.Durable, q.AutoDelete, q.Exclusive, false, args)
	return err
}

// The stored-arguments check can fail: a float TTL where the broker stores
// an integer, or x-queue-type on a classic queue, is caught both by the
// listing's comparison and by the broker's own on redeclaration.
func TestConformanceStoredArgumentsCanFail(t *testing.T) {
	testenv.NoLeaks(t)
	b := testenv.Broker(t, mq.Config{Logger: testenv.Logger(t)})
	q := testenv.Name(t)
	p := retry.Waits(40 * time.Second)
	testenv.CleanupDerived(t, q, p)
	ctx := testenv.Context(t, 30*time.Second)
	if err := b.Declare(ctx, topology.New().Queue(q, topology.Classic(), topology.Retry(p))); err != nil {
		t.Fatal(err)
	}
	rung := conformance.QueueSpec{Name: topology.RungQueue(q, 40*time.Second), Durable: true}
	floatTTL := topology.RungArguments(q, 40*time.Second)
	floatTTL[topology.ArgMessageTTL] = float64(40000)
	if err := conformanceRedeclare(ctx, b, rung, floatTTL); err == nil {
		t.Error("a float x-message-ttl was accepted as equivalent to the stored integer")
	}
	stored := listStored(t, q)
	got, err := stored[rung.Name].args()
	if err != nil {
		t.Fatal(err)
	}
	if got[topology.ArgMessageTTL] == conformance.Canon(float64(40000)) || got[topology.ArgMessageTTL] != conformance.Canon(int64(40000)) {
		t.Errorf("the rung's stored TTL is %s", got[topology.ArgMessageTTL])
	}
	classic, err := stored[q].args()
	if err != nil {
		t.Fatal(err)
	}
	// What the broker adds to a classic queue is its version's (4.x:
	// x-queue-type=classic), and redeclaring with it or without it is
	// accepted either way; a quorum type is refused.
	if c, ok := classic[topology.ArgQueueType]; ok != (brokerClassicAdds(testenv.BrokerVersion(t))[topology.ArgQueueType] != "") {
		t.Errorf("classic queue %s on RabbitMQ %v: x-queue-type stored %v (%s); brokerClassicAdds says otherwise", q, testenv.BrokerVersion(t), ok, c)
	}
	spec := conformance.QueueSpec{Name: q, Durable: true}
	for _, args := range []amqp.Table{nil, {topology.ArgQueueType: "classic"}} {
		if err := conformanceRedeclare(ctx, b, spec, args); err != nil {
			t.Errorf("redeclaring classic queue %s with %v was refused: %v", q, args, err)
		}
	}
	if err := conformanceRedeclare(ctx, b, spec, amqp.Table{topology.ArgQueueType: "quorum"}); err == nil {
		t.Error("x-queue-type=quorum was accepted on a classic queue")
	}
}
