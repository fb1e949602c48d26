//go:build integration

package integration

// Issue 15: conformance/hops.json and replay.json against the broker. A
// consumer runs the Standard stack; the copy each hop or replay lands in
// its target queue is taken from there and its headers compared, names and
// AMQP types, with the vectors. Then altered copies of the vectors (an
// attempt written as a string, a hop that overwrites traceparent, a replay
// that keeps the attempt) must fail against what was captured.

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/acemq/acemq-go/internal/conformance"
	"github.com/acemq/acemq-go/internal/testenv"
	"github.com/acemq/acemq-go/middleware"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/ops"
	"github.com/acemq/acemq-go/otelmq"
	"github.com/acemq/acemq-go/retry"
	"github.com/acemq/acemq-go/topology"
)

// conformanceRoute declares a direct exchange and a queue bound to it on a
// key, all goit.* and deleted afterwards, with every queue a consumer with
// policy p derives: the message is first delivered through a real exchange
// and key, so original-exchange and original-routing-key have something to
// record.
func conformanceRoute(t *testing.T, b *mq.Broker, p retry.Policy) conformance.Vars {
	t.Helper()
	q := testenv.Name(t)
	ex := q + ".ex"
	key := "conformance.key"
	testenv.CleanupDerived(t, q, p)
	testenv.CleanupExchanges(t, ex)
	tp := topology.New().Exchange(ex, topology.Direct).Queue(q).Binding(q, ex, key)
	if err := b.Declare(testenv.Context(t, 15*time.Second), tp); err != nil {
		t.Fatalf("declare: %v", err)
	}
	return conformance.Vars{"queue": q, "exchange": ex, "key": key}
}

// runHop runs one hops.json case on b and returns what landed in its
// target, with the headers of the delivery the handler saw as the incoming
// ones.
func runHop(t *testing.T, b *mq.Broker, c conformance.HopCase, brokerAdded []string) conformance.Run {
	t.Helper()
	p, err := c.Policy.Policy()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	vars := conformanceRoute(t, b, p)
	q := vars["queue"]
	var opts []middleware.StandardOption
	if c.RungsDeclared != nil && !*c.RungsDeclared {
		// The consumer declares nothing; its .dlq exists, its rungs do not.
		opts = append(opts, middleware.WithoutDeclare())
		if err := b.Declare(testenv.Context(t, 15*time.Second), topology.ForConsumer(q, retry.Policy{})); err != nil {
			t.Fatal(err)
		}
	}
	cause := errors.New(c.Error)
	var once sync.Once
	calls := make(chan amqp.Table, 16)
	h := mq.HandlerFunc(func(_ context.Context, d *mq.Delivery) error {
		seen := amqp.Table{}
		for k, v := range d.Headers {
			seen[k] = v
		}
		calls <- seen
		switch c.Handler {
		case "park":
			return middleware.Park(cause)
		case "reject":
			return middleware.Reject(cause)
		case "fail":
			return cause
		}
		once.Do(func() { t.Errorf("unknown handler %q", c.Handler) })
		return nil
	})
	incoming, err := conformance.DecodeTable(c.Incoming, vars)
	if err != nil {
		t.Fatal(err)
	}
	ctx := testenv.Context(t, 30*time.Second)
	cons, err := b.Consume(ctx, q, h, middleware.Standard(p, opts...))
	if err != nil {
		t.Fatal(err)
	}
	defer testenv.Stop(t, cons)
	from := time.Now()
	pub := b.Publisher(vars["exchange"])
	defer pub.Close()
	if err := pub.Publish(ctx, vars["key"], mq.Message{Body: []byte(`{"case":"conformance"}`), ContentType: "application/json", Headers: incoming}); err != nil {
		t.Fatal(err)
	}
	target := vars.Fill(c.Target)
	testenv.WaitCount(t, b, target, 1, 15*time.Second)
	got := testenv.GetAll(t, b, target)
	to := time.Now()
	if len(got) != 1 {
		t.Fatalf("%d messages in %s, want 1", len(got), target)
	}
	if string(got[0].Body) != `{"case":"conformance"}` {
		t.Errorf("the copy's body is %q", got[0].Body)
	}
	testenv.Stop(t, cons)
	if n := len(calls); n != 1 {
		t.Fatalf("the handler was called %d times, want once: every case's hop is the first failure's", n)
	}
	return conformance.Run{Vars: vars, Window: conformance.Window{From: from, To: to}, Incoming: <-calls,
		Got: got[0].Headers, BrokerAdded: brokerAdded}
}

func loadHops(t *testing.T) conformance.Hops {
	t.Helper()
	var v conformance.Hops
	if err := conformance.Load("hops.json", &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Cases) == 0 {
		t.Fatal("hops.json has no cases")
	}
	return v
}

// TestConformanceHops runs every hops.json case, without tracing and with
// it (the with_tracing expectations replacing theirs), and checks the
// altered copies fail.
func TestConformanceHops(t *testing.T) {
	testenv.NoLeaks(t)
	v := loadHops(t)
	for _, mode := range []string{"without tracing", "with tracing"} {
		t.Run(mode, func(t *testing.T) {
			cfg := mq.Config{Logger: testenv.Logger(t)}
			if mode == "with tracing" {
				tp := sdktrace.NewTracerProvider()
				t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
				cfg.Hooks = []any{otelmq.New(otelmq.WithTracerProvider(tp))}
			}
			b := testenv.Broker(t, cfg)
			got := map[string]conformance.Run{}
			for _, c := range v.Cases {
				t.Run(c.Name, func(t *testing.T) {
					run := runHop(t, b, c, v.BrokerAdded)
					got[c.Name] = run
					hc := c.HeaderCase
					if mode == "with tracing" {
						// The test's own publish is traced too: it writes the
						// message's creation context, which the hop then keeps.
						hc = c.Traced()
					} else {
						// Without tracing the handler sees exactly the case's
						// incoming headers (and what the broker adds: a quorum
						// queue's x-delivery-count on RabbitMQ 4.x).
						want, err := conformance.DecodeTable(c.Incoming, run.Vars)
						if err != nil {
							t.Fatal(err)
						}
						seen := amqp.Table{}
						for k, val := range run.Incoming {
							if !slices.Contains(v.BrokerAdded, k) {
								seen[k] = val
							}
						}
						if g, w := conformance.CanonTable(seen), conformance.CanonTable(want); g != w {
							t.Errorf("the handler saw %s, the case's incoming headers are %s", g, w)
						}
					}
					for _, f := range conformance.CheckHeaders(hc, run) {
						t.Error(f)
					}
				})
			}
			if t.Failed() || mode != "without tracing" {
				return
			}
			// The runner fails on copies that describe a broken library.
			exhausted := "every attempt used: .dlq, and x-acemq-attempt is the attempt the next delivery would be (4 after the third of three)"
			rung := "a failed attempt whose next wait is longer than the in-process limit goes to the broker rung"
			mutations := []struct {
				name, of, header string
				e                conformance.Expect
			}{
				{"the attempt written as a string", exhausted, "x-acemq-attempt", conformance.Expect{Is: conformance.Typed(`{"longstr": "4"}`)}},
				{"the attempt written as a long", exhausted, "x-acemq-attempt", conformance.Expect{Is: conformance.Typed(`{"long": 4}`)}},
				{"attempts used written on .dlq", exhausted, "x-acemq-attempt", conformance.Expect{Is: conformance.Typed(`{"signedint": 3}`)}},
				{"a hop that overwrites traceparent", rung, "traceparent", conformance.Expect{Is: conformance.Typed(`{"longstr": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}`)}},
				{"a hop that drops an application header", rung, "x-tenant", conformance.Expect{Absent: true}},
				{"a rung hop that writes a reason", rung, "x-acemq-reason", conformance.Expect{Is: conformance.Typed(`{"longstr": "exhausted"}`)}},
				{"replay headers dropped on the next dead letter", exhausted, "x-acemq-replayed-from", conformance.Expect{Absent: true}},
				{"the failure time written as a string", exhausted, "x-acemq-failed-at", conformance.Expect{Is: conformance.Typed(`{"longstr": "{now}"}`)}},
			}
			for _, m := range mutations {
				var c conformance.HopCase
				for _, x := range v.Cases {
					if x.Name == m.of {
						c = x
					}
				}
				if c.Name == "" {
					t.Fatalf("no case %q", m.of)
				}
				hc := c.HeaderCase
				hc.Headers = cloneExpects(hc.Headers)
				hc.Headers[m.header] = m.e
				if f := conformance.CheckHeaders(hc, got[c.Name]); len(f) == 0 {
					t.Errorf("%s: the runner passed the altered case", m.name)
				} else {
					t.Logf("%s: %s", m.name, f[0])
				}
			}
			// A header the vector does not list is noticed too.
			c := v.Cases[0]
			run := got[c.Name]
			extra := amqp.Table{"x-acemq-unlisted": int32(1)}
			for k, val := range run.Got {
				extra[k] = val
			}
			run.Got = extra
			if f := conformance.CheckHeaders(c.HeaderCase, run); len(f) == 0 {
				t.Error("an unlisted header passed the runner")
			}
		})
	}
}

func cloneExpects(m map[string]conformance.Expect) map[string]conformance.Expect {
	out := make(map[string]conformance.Expect, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// TestConformanceReplay runs every replay.json case: the case's incoming
// message is put into its from queue as a dead letter would be, ops.Replay
// moves it, and what lands in the target is compared. Then a copy that
// keeps the attempt must fail.
func TestConformanceReplay(t *testing.T) {
	testenv.NoLeaks(t)
	var v conformance.Replays
	if err := conformance.Load("replay.json", &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Cases) == 0 {
		t.Fatal("replay.json has no cases")
	}
	b := testenv.Broker(t, mq.Config{Logger: testenv.Logger(t)})
	for _, c := range v.Cases {
		t.Run(c.Name, func(t *testing.T) {
			vars := conformanceRoute(t, b, retry.Policy{})
			if err := b.Declare(testenv.Context(t, 15*time.Second), topology.ForConsumer(vars["queue"], retry.Policy{})); err != nil {
				t.Fatal(err)
			}
			from := vars.Fill(c.From)
			incoming, err := conformance.DecodeTable(c.Incoming, vars)
			if err != nil {
				t.Fatal(err)
			}
			testenv.Publish(t, b, from, mq.Message{Body: []byte("replayed"), Headers: incoming})
			start := time.Now()
			res, err := ops.Replay(testenv.Context(t, 20*time.Second), b, from, ops.ReplayOptions{})
			if err != nil || res.Moved != 1 {
				t.Fatalf("Replay = %+v, %v; want one message moved", res, err)
			}
			target := vars.Fill(c.Target)
			got := testenv.GetAll(t, b, target)
			if len(got) != 1 {
				t.Fatalf("%d messages in %s, want 1", len(got), target)
			}
			run := conformance.Run{Vars: vars, Window: conformance.Window{From: start, To: time.Now()}, Got: got[0].Headers, BrokerAdded: v.BrokerAdded}
			for _, f := range conformance.CheckHeaders(c.HeaderCase, run) {
				t.Error(f)
			}
			if t.Failed() {
				return
			}
			for _, m := range []struct {
				name, header string
				e            conformance.Expect
			}{
				{"a replay that keeps the attempt", "x-acemq-attempt", conformance.Expect{Kept: true}},
				{"a replay that keeps the failure reason", "x-acemq-reason", conformance.Expect{Kept: true}},
				{"a replay that does not record where it came from", "x-acemq-replayed-from", conformance.Expect{Absent: true}},
			} {
				hc := c.HeaderCase
				hc.Headers = cloneExpects(hc.Headers)
				hc.Headers[m.header] = m.e
				if f := conformance.CheckHeaders(hc, run); len(f) == 0 {
					t.Errorf("%s: the runner passed the altered case", m.name)
				}
			}
		})
	}
}
