//go:build field

package integration

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acemq/acemq-go/internal/field/fault"
)

type fnetProcs struct {
	mu     sync.Mutex
	killed []string
	cuts   int
}

func (p *fnetProcs) Kill(role string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.killed = append(p.killed, role)
	return nil
}

func (p *fnetProcs) CutConnections() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cuts++
	return nil
}

// TestFieldFaultRun runs overlapping faults of every script kind through
// the real field.sh (a partition, a node killed inside it, a lossy link,
// PostgreSQL killed, a connection cut): each starts and ends without an
// error, cut-ok holds while the partition lasts, and afterwards the field
// is whole with no rule or qdisc of ours left.
func TestFieldFaultRun(t *testing.T) {
	s := fault.Schedule{Seed: -1, Duration: time.Minute, Faults: []fault.Fault{
		{At: 0, For: 25 * time.Second, Kind: fault.Partition, Args: []string{"f1", "f2,f3"}},
		{At: 2 * time.Second, For: 10 * time.Second, Kind: fault.Netem, Args: []string{"f3", "loss", "5%"}},
		{At: 3 * time.Second, For: 3 * time.Second, Kind: fault.PGKill},
		{At: 4 * time.Second, Kind: fault.ConnCut},
		{At: 5 * time.Second, For: 10 * time.Second, Kind: fault.KillNode, Args: []string{"f2"}},
	}}
	t.Logf("schedule:\n%s", s)
	var mu sync.Mutex
	var evs []fault.Event
	procs := &fnetProcs{}
	t0 := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	err := fault.Run(ctx, s, fnetScript, procs, func(e fault.Event) {
		mu.Lock()
		evs = append(evs, e)
		mu.Unlock()
		t.Logf("%+.1fs %s %s %s", e.T.Sub(t0).Seconds(), e.Phase, e.Fault, e.Err)
	})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	t.Logf("FIELDFACT fault.Run of 5 overlapping faults took %.0fs", time.Since(t0).Seconds())
	ends := 0
	for _, e := range evs {
		if e.Phase == fault.PhaseError {
			t.Errorf("error event: %s %s", e.Fault, e.Err)
		}
		if e.Phase == fault.PhaseEnd {
			ends++
		}
	}
	if ends != len(s.Faults) {
		t.Fatalf("%d faults ended, want %d", ends, len(s.Faults))
	}
	if procs.cuts != 1 {
		t.Fatalf("connections cut %d times, want 1", procs.cuts)
	}
	out, err := fnetSh(t, 2*time.Minute, "status")
	if err != nil || strings.Count(out, "sees 3 running") != 3 || !strings.Contains(out, "cuts in force: none") || strings.Contains(out, "netem:") {
		t.Fatalf("the field is not whole after Run: %v\n%s", err, out)
	}
	sfx := ""
	if i := os.Getenv("FIELD_INSTANCE"); i != "" && i != "0" {
		sfx = "_" + i
	}
	out2, _ := exec.Command("nft", "list", "tables").Output()
	for _, l := range strings.Split(string(out2), "\n") {
		if l == "table inet acemq_field"+sfx || l == "table inet acemq_field_netem"+sfx {
			t.Fatalf("a table of ours is left: %s", l)
		}
	}
}
