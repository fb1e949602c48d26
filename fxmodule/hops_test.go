package fxmodule

import (
	"testing"
	"time"

	"github.com/acemq/acemq-go/retry"
	"github.com/acemq/acemq-go/topology"
)

// A one-attempt policy ("no retries") is a policy: a Standard consumer
// takes it from the topology instead of finding none (issue 38, defect 7).
func TestStandardTakesAOneAttemptPolicy(t *testing.T) {
	one := retry.Fixed(1, time.Second)
	topo := topology.New().Queue("orders", topology.DeadLetter(), topology.Retry(one))
	r, err := runnerFor(t, topo, nil, Consumer{Queue: "orders", Handler: noop, Standard: true})
	if err != nil {
		t.Fatalf("Standard with topology.Retry(retry.Fixed(1, …)): %v", err)
	}
	p, ok := policyOf(t, r.consumers[0])
	if !ok || !p.Equal(one) || p.Attempts() != 1 {
		t.Fatalf("consumer runs %v (ladder %v), want the topology's one-attempt policy", p, ok)
	}
	if got := consoleQueues(topo); len(got) != 1 || got[0] != "orders" {
		t.Fatalf("console queues %v, want [orders]", got)
	}
}
