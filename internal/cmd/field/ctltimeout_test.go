//go:build field

package main

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/acemq/acemq-go/internal/testenv"
)

// TestCtlTimeoutLeavesNoCLI replays what broke the soak of seed 1853179153
// and four seeds beside it: field.sh bounds each rabbitmqctl call with
// timeout(1), but Debian's wrapper runs the CLI through su, in a session
// of its own, so the kill reached only the wrapper and the CLI's Erlang VM
// lived on, waiting on a node. Each such VM holds one of the eleven ports
// every rabbitmqctl of that RabbitMQ may listen on (35672-35682); the soak's
// channel sampler left one at every sample that hung (ten in 30 minutes),
// and then no rabbitmqctl on the machine could start ("nodistribution"):
// nodes were reported as not starting, field setups failed, the 4.3
// broker was not recognised. A call that times out must leave no CLI
// behind.
//
//	FIELD_INSTANCE=5 go test -tags field -run TestCtlTimeoutLeavesNoCLI -timeout 10m -v ./internal/cmd/field
func TestCtlTimeoutLeavesNoCLI(t *testing.T) {
	script, sh := fieldSh(t)
	sh("up")
	t.Cleanup(func() { _ = exec.Command(script, "down").Run() })

	// An eval that outlives its bound, marked so its VM can be found.
	marker := fmt.Sprintf("timer:sleep(%d)", 600000+time.Now().UnixNano()%1000)
	c := exec.Command(script, "ctl", "eval", marker+".")
	c.Env = append(os.Environ(), "FIELD_CTL_TIMEOUT=5")
	start := time.Now()
	if err := c.Run(); err == nil {
		t.Fatalf("field.sh ctl eval %s. succeeded; want it cut off by FIELD_CTL_TIMEOUT=5", marker)
	}
	if d := time.Since(start); d > time.Minute {
		t.Fatalf("field.sh ctl returned after %s, want about 5 s", d)
	}
	time.Sleep(2 * time.Second)
	left := testenv.KillCLIs(marker)
	if len(left) > 0 {
		t.Fatalf("field.sh ctl timed out after %s and left the CLI's VM running (pids %v, now killed)", time.Since(start).Round(time.Second), left)
	}
}
