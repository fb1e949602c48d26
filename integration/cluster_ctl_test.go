//go:build cluster

package integration

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/acemq/acemq-go/internal/testenv"
)

// scripts/cluster.sh bounds each rabbitmqctl call (CLUSTER_CTL_TIMEOUT);
// a call cut off by the bound must not leave the CLI's VM behind, holding
// a CLI port and a pipe: as broker.sh's ctl (TestBrokerCtlTimeoutLeavesNoCLI),
// it runs the CLI itself as root, not Debian's wrapper, whose su takes the
// VM out of reach of timeout's kill.
func TestClusterCtlTimeoutLeavesNoCLI(t *testing.T) {
	marker := fmt.Sprintf("timer:sleep(%d)", 600000+time.Now().UnixNano()%1000)
	c := exec.Command(clusterScript, "ctl", "c1", "eval", marker+".")
	c.Env = append(os.Environ(), "CLUSTER_CTL_TIMEOUT=5")
	// To a file, not a pipe: a CLI left behind would hold a pipe open.
	out, err := os.Create(t.TempDir() + "/out")
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	c.Stdout, c.Stderr = out, out
	start := time.Now()
	if err := c.Run(); err == nil {
		b, _ := os.ReadFile(out.Name())
		t.Fatalf("cluster.sh ctl c1 eval %s. succeeded (%s); want it cut off by CLUSTER_CTL_TIMEOUT=5", marker, b)
	}
	if d := time.Since(start); d > time.Minute {
		t.Fatalf("cluster.sh ctl returned after %s, want about 5 s", d)
	}
	// The call reached the node: a plain call through the same verb works.
	if b, err := exec.Command(clusterScript, "ctl", "c1", "eval", "ok.").CombinedOutput(); err != nil {
		t.Fatalf("cluster.sh ctl c1 eval ok.: %v: %s", err, b)
	}
	time.Sleep(2 * time.Second)
	if left := testenv.KillCLIs(marker); len(left) > 0 {
		t.Fatalf("cluster.sh ctl timed out after %s and left the CLI's VM running (pids %v, now killed)", time.Since(start).Round(time.Second), left)
	}
}
