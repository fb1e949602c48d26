//go:build cluster

package integration

import (
	"os/exec"
	"testing"
)

// scripts/cluster.sh bounds each rabbitmqctl call (CLUSTER_CTL_TIMEOUT);
// a call cut off by the bound must not leave the CLI's VM behind, holding
// a CLI port and a pipe: as broker.sh's ctl (TestBrokerCtlTimeoutLeavesNoCLI),
// it runs the CLI itself as root, not Debian's wrapper, whose su takes the
// VM out of reach of timeout's kill.
func TestClusterCtlTimeoutLeavesNoCLI(t *testing.T) {
	scriptCutOff(t, clusterScript, "CLUSTER_CTL_TIMEOUT=5", "ctl", "c1")
	// The verb reaches the node: a plain call through it works.
	if b, err := exec.Command(clusterScript, "ctl", "c1", "eval", "ok.").CombinedOutput(); err != nil {
		t.Fatalf("cluster.sh ctl c1 eval ok.: %v: %s", err, b)
	}
}
