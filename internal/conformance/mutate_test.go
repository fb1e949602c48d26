package conformance_test

import (
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/internal/conformance"
	"github.com/acemq/acemq-go/mq"
)

// The runner must be able to fail. Each case alters a copy of the expected
// data so that it describes a library breaking one rule of the contract,
// and the runner, fed the altered copy, must report a difference: if it did
// not, Go breaking that rule would pass too. The unaltered files pass (the
// runners in topology, retry and mq say so; checked here as well, so a
// mutation that "fails" only because the file is broken proves nothing).

func TestMutatedVectorsFail(t *testing.T) {
	type check func(t *testing.T, edit func(map[string]any) error) []string
	topologies := func(t *testing.T, edit func(map[string]any) error) []string {
		var v conformance.Topologies
		if err := conformance.Mutate("topologies.json", &v, edit); err != nil {
			t.Fatal(err)
		}
		return conformance.CheckTopologies(v)
	}
	policies := func(t *testing.T, edit func(map[string]any) error) []string {
		var v conformance.Policies
		if err := conformance.Mutate("policies.json", &v, edit); err != nil {
			t.Fatal(err)
		}
		return conformance.CheckPolicies(v)
	}
	names := func(t *testing.T, edit func(map[string]any) error) []string {
		var v conformance.Names
		if err := conformance.Mutate("names.json", &v, edit); err != nil {
			t.Fatal(err)
		}
		return conformance.CheckNames(v)
	}
	validation := func(t *testing.T, edit func(map[string]any) error) []string {
		var v conformance.Validation
		if err := conformance.Mutate("validation.json", &v, edit); err != nil {
			t.Fatal(err)
		}
		return conformance.CheckValidation(v)
	}
	attempts := func(t *testing.T, edit func(map[string]any) error) []string {
		var v conformance.Attempts
		if err := conformance.Mutate("attempt.json", &v, edit); err != nil {
			t.Fatal(err)
		}
		return conformance.CheckAttempts(v, mq.AttemptOf)
	}
	queueArgs := func(root map[string]any, topo, queue string) (map[string]any, error) {
		tv, err := conformance.Named(root, "topologies", "name", topo)
		if err != nil {
			return nil, err
		}
		q, err := conformance.Named(tv, "queues", "name", queue)
		if err != nil {
			return nil, err
		}
		args, _ := q["arguments"].(map[string]any)
		if args == nil {
			args = map[string]any{}
			q["arguments"] = args
		}
		return args, nil
	}
	printout := func(root map[string]any, topo string) ([]any, error) {
		tv, err := conformance.Named(root, "topologies", "name", topo)
		if err != nil {
			return nil, err
		}
		return tv["printout"].([]any), nil
	}
	tests := []struct {
		name  string
		run   check
		edit  func(map[string]any) error
		wants string // a piece of the difference the runner must report
	}{
		{"a float TTL on a rung", topologies, func(r map[string]any) error {
			args, err := queueArgs(r, "contract example", "shipping.orders.retry.40s")
			args["x-message-ttl"] = conformance.Raw(`{"double": 40000}`)
			return err
		}, "x-message-ttl: long(40000)"},
		{"x-queue-type='classic' on a classic queue", topologies, func(r map[string]any) error {
			args, err := queueArgs(r, "queue types: quorum by default, classic by leaving x-queue-type off", "q.classic")
			args["x-queue-type"] = conformance.Raw(`{"longstr": "classic"}`)
			return err
		}, "queue q.classic: arguments"},
		{"x-queue-type left off a default queue", topologies, func(r map[string]any) error {
			args, err := queueArgs(r, "queue types: quorum by default, classic by leaving x-queue-type off", "q.default")
			delete(args, "x-queue-type")
			return err
		}, "queue q.default: arguments"},
		{"a derived queue typed quorum", topologies, func(r map[string]any) error {
			args, err := queueArgs(r, "contract example", "shipping.orders.dlq")
			args["x-queue-type"] = conformance.Raw(`{"longstr": "quorum"}`)
			return err
		}, "queue shipping.orders.dlq: arguments"},
		{"a printout count in the singular", topologies, func(r map[string]any) error {
			p, err := printout(r, "a queue with no flags and no arguments prints no parentheses; counts are always plural")
			if err == nil {
				p[0] = "Topology: 0 exchanges, 1 queue, 0 bindings"
			}
			return err
		}, "printout line 1"},
		{"empty parentheses for a queue with nothing to say", topologies, func(r map[string]any) error {
			p, err := printout(r, "a queue with no flags and no arguments prints no parentheses; counts are always plural")
			if err == nil {
				p[1] = "  declare queue tmp ()"
			}
			return err
		}, "printout line 2"},
		{"an empty binding key printed as nothing", topologies, func(r map[string]any) error {
			p, err := printout(r, "printout of argument values: strings quoted (quotes inside not escaped), integers and booleans bare, a float as its shortest decimal (.0 when whole; exponent form at 1e6 and above or below 1e-4); empty binding key as ''")
			if err == nil {
				p[3] = strings.Replace(p[3].(string), "on ''", "on ", 1)
			}
			return err
		}, "printout line 4"},
		{"a quote inside a string escaped", topologies, func(r map[string]any) error {
			p, err := printout(r, "printout of argument values: strings quoted (quotes inside not escaped), integers and booleans bare, a float as its shortest decimal (.0 when whole; exponent form at 1e6 and above or below 1e-4); empty binding key as ''")
			if err == nil {
				p[2] = strings.Replace(p[2].(string), "q='it's'", `q='it\'s'`, 1)
			}
			return err
		}, "printout line 3"},
		{"the derived queues met before the queue itself", topologies, func(r map[string]any) error {
			p, err := printout(r, "contract example")
			if err == nil {
				p[4], p[5] = p[5], p[4]
			}
			return err
		}, "printout line 5"},
		{"< for <= at the in-process limit", policies, func(r map[string]any) error {
			c, err := conformance.Named(r, "valid", "name", "the limit is inclusive: 30s waits in-process, 31s on the broker")
			if err != nil {
				return err
			}
			c["broker_rungs_ms"] = conformance.Raw(`[30000, 31000]`)
			c["after"].([]any)[0].(map[string]any)["action"] = "broker"
			return nil
		}, "after attempt 1: in-process wait 30000 ms next 2, want broker"},
		{"the exhausted step one attempt late", policies, func(r map[string]any) error {
			c, err := conformance.Named(r, "valid", "name", "contract example: exponential(6, 10s)")
			if err != nil {
				return err
			}
			c["after"].([]any)[5] = conformance.Raw(`{"attempt": 6, "action": "broker", "wait_ms": 320000, "next": 7}`)
			return nil
		}, "after attempt 6"},
		{"a broker rung of 1.5 s accepted", policies, func(r map[string]any) error {
			inv := r["invalid"].([]any)
			c := inv[0].(map[string]any)
			r["valid"] = append(r["valid"].([]any), map[string]any{
				"name": "accepted by mistake", "policy": c["policy"], "attempts": 2,
				"schedule_ms": conformance.Raw(`[1500]`), "broker_rungs_ms": conformance.Raw(`[1500]`),
				"in_process_limit_ms": 0, "after": conformance.Raw(`[{"attempt": 1, "action": "broker", "wait_ms": 1500, "next": 2}]`),
			})
			return nil
		}, "refused"},
		{"short() rounding instead of truncating", names, func(r map[string]any) error {
			for _, e := range r["short"].([]any) {
				if m := e.(map[string]any); m["ms"].(interface{ String() string }).String() == "1500" {
					m["short"] = "2s"
				}
			}
			return nil
		}, "short(1500 ms)"},
		{"a classic queue declared with x-queue-type='classic' accepted", validation, func(r map[string]any) error {
			r["accepted"] = append(r["accepted"].([]any), conformance.Raw(
				`{"name": "classic spelled out", "calls": [{"call": "queue", "name": "a", "arguments": {"x-queue-type": {"longstr": "classic"}}}]}`))
			return nil
		}, "refused, the vector says it is accepted"},
		{"quorum with exclusive accepted", validation, func(r map[string]any) error {
			c, err := conformance.Named(r, "refused", "name", "quorum asked for together with exclusive")
			if err != nil {
				return err
			}
			c["calls"] = conformance.Raw(`[{"call": "queue", "name": "a", "type": "quorum"}]`)
			return nil
		}, "call 0 is accepted"},
		{"the wrong call blamed", validation, func(r map[string]any) error {
			c, err := conformance.Named(r, "refused", "name", "the same queue twice with different settings")
			if err != nil {
				return err
			}
			c["refused"] = conformance.Raw(`0`)
			return nil
		}, ""},
		{"a string attempt read as 1", attempts, func(r map[string]any) error {
			for _, e := range r["cases"].([]any) {
				if m := e.(map[string]any); m["name"] == "longstr" {
					m["attempt"] = conformance.Raw(`1`)
				}
			}
			return nil
		}, `attempt "longstr"`},
		{"a long attempt ignored", attempts, func(r map[string]any) error {
			for _, e := range r["cases"].([]any) {
				if m := e.(map[string]any); m["name"] == "long" {
					m["attempt"] = conformance.Raw(`1`)
				}
			}
			return nil
		}, `attempt "long"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if base := tc.run(t, func(map[string]any) error { return nil }); len(base) > 0 {
				t.Fatalf("the unaltered vectors fail already:\n%s", strings.Join(base, "\n"))
			}
			got := tc.run(t, tc.edit)
			if len(got) == 0 {
				t.Fatal("the runner passed the altered vectors")
			}
			if !strings.Contains(strings.Join(got, "\n"), tc.wants) {
				t.Errorf("the runner failed, but not on %q:\n%s", tc.wants, strings.Join(got, "\n"))
			}
			t.Logf("runner: %s", got[0])
		})
	}
}

// A reader that gets the attempt header wrong fails attempt.json: the
// runner checks the function it is given, not a copy of the answers.
func TestBrokenAttemptReaderFails(t *testing.T) {
	var v conformance.Attempts
	if err := conformance.Load("attempt.json", &v); err != nil {
		t.Fatal(err)
	}
	readers := map[string]func(amqp.Table) int{
		"integers only": func(h amqp.Table) int {
			if n, ok := h[mq.HeaderAttempt].(int32); ok && n >= 1 {
				return int(n)
			}
			return 1
		},
		"no cap": func(h amqp.Table) int {
			if n, ok := h[mq.HeaderAttempt].(int64); ok {
				return int(n)
			}
			return mq.AttemptOf(h)
		},
		"absent is 0": func(h amqp.Table) int {
			if _, ok := h[mq.HeaderAttempt]; !ok {
				return 0
			}
			return mq.AttemptOf(h)
		},
	}
	for name, read := range readers {
		if got := conformance.CheckAttempts(v, read); len(got) == 0 {
			t.Errorf("reader %q passes attempt.json", name)
		}
	}
}
