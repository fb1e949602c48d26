//go:build chaos

package integration

import (
	"fmt"
	"testing"
)

// TestChaosZZSummary runs after every other chaos test (go test runs them
// in file order, and this file sorts last) and prints their CHAOS lines
// together: the per-scenario report of `make chaos`.
func TestChaosZZSummary(t *testing.T) {
	lines := chaosSummary.all()
	if len(lines) == 0 {
		t.Log("no chaos scenario ran in this run (filtered with -run): nothing to summarise")
		return
	}
	fmt.Println("=== CHAOS SUMMARY (at least once: lost must be 0; duplicates are allowed and counted)")
	for _, l := range lines {
		fmt.Println(l)
	}
}
