package workload

import (
	"testing"
	"time"

	"github.com/acemq/acemq-go/topology"
)

// The field's waits go through durable rungs unless ClassicRungs asks for
// the classic ones: the rung the workload hooks, watches, drains and
// declares is the one its policy's ladder publishes to.
func TestWorkRungsDurableByDefault(t *testing.T) {
	n := Names{Prefix: "field.", Tables: "field_"}
	const durable, classic = "field.work.retry.3s.quorum", "field.work.retry.3s"
	if got := n.Rungs(); len(got) != 1 || got[durable] != 3*time.Second {
		t.Fatalf("default rungs %v, want only %s (3s)", got, durable)
	}
	if q := n.Queues(); q[len(q)-1] != durable {
		t.Fatalf("queues %v: want the durable rung last", q)
	}
	if !n.WorkPolicy().DurableRungs() || n.RungMode() != "durable" {
		t.Fatalf("the default policy does not ask for durable rungs")
	}
	declared := false
	for _, q := range n.Topology().Queues() {
		if q.Name == durable {
			declared = true
			if q.Args[topology.ArgQueueType] != topology.QueueTypeQuorum {
				t.Fatalf("%s declared with %v, want a quorum queue", durable, q.Args)
			}
		}
		if q.Name == classic {
			t.Fatalf("the default topology declares the classic rung %s", classic)
		}
	}
	if !declared {
		t.Fatalf("the topology does not declare %s", durable)
	}
	c := Names{Prefix: "field.", Tables: "field_", ClassicRungs: true}
	if got := c.Rungs(); len(got) != 1 || got[classic] != 3*time.Second || c.WorkPolicy().DurableRungs() || c.RungMode() != "classic" {
		t.Fatalf("classic rungs %v", got)
	}
}
