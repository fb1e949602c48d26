package main

import (
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq-go/internal/field/fault"
)

// TestPartitionLeaderCountedAndPaired: a partition-leader counts as a
// partition on the FIELD line, and its start and end (logged by fault.Run
// as the cut made) pair into one span naming the node cut, the span the
// checker attributes losses by.
func TestPartitionLeaderCountedAndPaired(t *testing.T) {
	s := faultSchedule{s: fault.Schedule{Faults: []fault.Fault{
		{At: 20 * time.Second, For: 30 * time.Second, Kind: fault.PartitionLeader, Args: []string{"else", "f2"}},
		{At: 30 * time.Second, Kind: fault.ConnCut},
	}}}
	if n, p, _, _ := s.Counts(); n != 2 || p != 1 {
		t.Fatalf("faults=%d partitions=%d, want 2 and 1", n, p)
	}
	t0 := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	cut := []string{"f3", "f1,f2"}
	sp := spans([]faultEvent{
		{T: t0, Kind: "partition-leader", Args: cut, Phase: "start", Note: "f3 leads 2 of 2 quorum queues"},
		{T: t0.Add(time.Second), Kind: "conn-cut", Phase: "start"},
		{T: t0.Add(30 * time.Second), Kind: "partition-leader", Args: cut, Phase: "end"},
	})
	if len(sp) != 2 || sp[0].Kind != "partition-leader" || strings.Join(sp[0].Args, " ") != "f3 f1,f2" || !sp[0].End.Equal(t0.Add(30*time.Second)) {
		t.Fatalf("spans %+v", sp)
	}
}

// TestReplayNamesTheVersion: a field run's replay names the schedule's
// version; a cluster run's (a drill of its own) names the mode instead.
func TestReplayNamesTheVersion(t *testing.T) {
	o := options{seed: 5, duration: 4 * time.Minute, mode: "field", version: 1}
	if got := o.replay(); got != "SEED=5 DURATION=4m0s SCHEDULE_VERSION=1" {
		t.Fatalf("field replay %q", got)
	}
	o.mode, o.version = "cluster", 0
	if got := o.replay(); got != "SEED=5 DURATION=4m0s FIELD_MODE=cluster" {
		t.Fatalf("cluster replay %q", got)
	}
	o.mode, o.version = "field", 9
	if _, err := fieldSchedule(o); err == nil || !strings.Contains(err.Error(), "SCHEDULE_VERSION") {
		t.Fatalf("version 9: %v", err)
	}
}
