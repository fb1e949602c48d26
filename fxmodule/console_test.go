package fxmodule

import (
	"slices"
	"strings"
	"testing"

	"go.uber.org/fx"

	"github.com/acemq/acemq-go/ops"
	"github.com/acemq/acemq-go/topology"
)

// The console watches the queues the topology gives a .dlq or a .parked.
func TestConsoleQueuesFromTheTopology(t *testing.T) {
	topo := topology.New().
		Queue("orders", topology.DeadLetter(), topology.Retry(declared)).
		Queue("audit", topology.DeadLetter()).
		Queue("billing", topology.Retry(declared)).
		Queue("plain")
	if got := consoleQueues(topo); !slices.Equal(got, []string{"audit", "billing", "orders"}) {
		t.Fatalf("consoleQueues = %v", got)
	}
	if consoleQueues(nil) != nil {
		t.Fatal("a nil topology has queues")
	}
}

// An option the console cannot use fails fx.New, naming WithConsole.
func TestWithConsoleRefusesBadOptions(t *testing.T) {
	err := fx.New(fx.NopLogger, fx.Supply(cfg()), Module, WithConsole(ops.ConsoleOptions{BasePath: "dlq/"})).Err()
	if err == nil || !strings.Contains(err.Error(), "fxmodule.WithConsole") || !strings.Contains(err.Error(), "BasePath") {
		t.Fatalf("fx.New: %v", err)
	}
}
