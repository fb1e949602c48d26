//go:build integration

package integration

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq-go/internal/testenv"
	"github.com/acemq/acemq-go/mq"
)

// The demo (`make demo`) runs to completion by itself, shows every path of
// the ladder — a success, an in-process retry, a broker retry, a park and a
// dead letter — and leaves nothing behind. It runs under a goit.* prefix.
func TestDemoShowsTheLadderAndCleansUp(t *testing.T) {
	ctx := testenv.Context(t, 90*time.Second)
	bin := filepath.Join(t.TempDir(), "orders")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "../examples/orders")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the demo: %v\n%s", err, out)
	}
	prefix := testenv.Name(t) + "."
	cmd := exec.CommandContext(ctx, bin)
	cmd.Env = append(os.Environ(), "AMQP_URL="+testenv.URL(), "DEMO_PREFIX="+prefix, "DEMO_NO_COLOR=1")
	start := time.Now()
	out, err := cmd.CombinedOutput()
	took := time.Since(start)
	text := string(out)
	if err != nil {
		t.Fatalf("the demo failed after %v: %v\n%s", took, err, text)
	}
	if took > time.Minute {
		t.Errorf("the demo took %v; it should end by itself within a minute", took)
	}
	for what, marker := range map[string]string{
		"the topology plan first": "declare queue " + prefix + "shipping.orders.retry.1s",
		"a success":               "shipped",
		"an in-process retry":     "kind=in-process",
		"a broker retry":          "outcome=retry",
		"a park":                  "outcome=park",
		"a dead letter":           "outcome=dead-letter",
		"one trace per order":     "publish " + prefix + "shipping.orders.dlq",
		"the clean-up":            "deleted exchange",
	} {
		if !strings.Contains(text, marker) {
			t.Errorf("the demo's output does not show %s (%q)", what, marker)
		}
	}
	if i, j := strings.Index(text, "Topology:"), strings.Index(text, "shipped"); i < 0 || j < i {
		t.Errorf("the plan is not printed before the first message is handled")
	}
	b := testenv.Broker(t, mq.Config{Logger: testenv.Discard()})
	for _, q := range []string{"shipping.orders", "shipping.orders.dlq", "shipping.orders.parked", "shipping.orders.retry.1s",
		"shipping.orders.retry.2s", "billing.orders", "billing.orders.dlq", "billing.orders.parked"} {
		if ok, err := b.QueueExists(context.Background(), prefix+q); err != nil || ok {
			t.Errorf("queue %s%s left behind (exists=%v, err=%v)", prefix, q, ok, err)
		}
	}
	t.Logf("the demo ran in %v", took.Round(time.Millisecond))
}
