//go:build integration

package integration

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/acemq/acemq-go/internal/testenv"
)

// scripts/broker.sh bounds each rabbitmqctl call with timeout(1). Run as
// root (as CI runs it), Debian's /usr/sbin/rabbitmqctl runs the CLI
// through su, in a session of its own, so the kill reaches only the
// wrapper and the CLI's Erlang VM lives on, waiting on its node; each such
// VM holds one of the eleven ports a CLI of that RabbitMQ may listen on,
// and with all taken no rabbitmqctl on the machine starts (what stopped a
// soak and four field seeds, through field.sh, which was mended first). A
// call that times out must leave no CLI behind, for any user, on every
// version whose node runs here.
func TestBrokerCtlTimeoutLeavesNoCLI(t *testing.T) {
	// The machine's broker always (make test starts it); 4.3 and 4.0 when
	// their nodes answer (make suites starts them).
	versions := []string{"3.10"}
	for _, v := range []struct{ version, port string }{{"4.3", "5673"}, {"4.0", "5674"}} {
		if c, err := net.DialTimeout("tcp", "127.0.0.1:"+v.port, time.Second); err == nil {
			c.Close()
			versions = append(versions, v.version)
		}
	}
	for _, v := range versions {
		t.Run(v, func(t *testing.T) {
			scriptCutOff(t, "../scripts/broker.sh", "BROKER_CTL_TIMEOUT=5", "ctl", v)
		})
	}
}

// The tests' own rabbitmqctl calls (testenv.Rabbitmqctl, bounded by their
// context) must not leave a CLI behind either when the bound cuts one off:
// the suite makes hundreds of them, on every version CI runs.
func TestRabbitmqctlTimeoutLeavesNoCLI(t *testing.T) {
	marker := fmt.Sprintf("timer:sleep(%d)", 600000+time.Now().UnixNano()%1000)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	if out, err := testenv.Rabbitmqctl(ctx, "", "eval", marker+"."); err == nil {
		t.Fatalf("rabbitmqctl eval %s. succeeded (%s); want it cut off by its 5 s context", marker, out)
	}
	if d := time.Since(start); d > time.Minute {
		t.Fatalf("testenv.Rabbitmqctl returned after %s, want about 5 s", d)
	}
	time.Sleep(2 * time.Second)
	if left := testenv.KillCLIs(marker); len(left) > 0 {
		t.Fatalf("testenv.Rabbitmqctl was cut off after %s and left the CLI's VM running (pids %v, now killed)", time.Since(start).Round(time.Second), left)
	}
}
