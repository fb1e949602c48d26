//go:build integration

package integration

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/acemq/acemq-go/internal/testenv"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/retry"
	"github.com/acemq/acemq-go/topology"
)

// Issue 29: `make demo` interrupted (Ctrl-C, SIGTERM) cleans up what it
// declared; its names cannot collide with a service's on a shared broker
// (a per-run prefix); and it never deletes a queue it did not create.

// demoBinary builds examples/orders into a temporary directory.
func demoBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "orders")
	build := exec.CommandContext(testenv.Context(t, 2*time.Minute), "go", "build", "-o", bin, "../examples/orders")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the demo: %v\n%s", err, out)
	}
	return bin
}

var demoDeclared = regexp.MustCompile(`(?m)^\s*declare (queue|exchange) (\S+)`)

// demoNames is what the demo's printed plan declares, without the
// library's shared acemq.dlx and acemq.retry (other services' as much as
// the demo's: never deleted by it).
func demoNames(out string) (queues, exchanges []string) {
	for _, m := range demoDeclared.FindAllStringSubmatch(out, -1) {
		switch {
		case m[2] == topology.DeadLetterExchange, m[2] == topology.RetryExchange:
		case m[1] == "queue":
			queues = append(queues, m[2])
		default:
			exchanges = append(exchanges, m[2])
		}
	}
	return queues, exchanges
}

// demoExchangeExists asks the broker with a passive declare.
func demoExchangeExists(t *testing.T, b *mq.Broker, name string) bool {
	t.Helper()
	ch, err := b.Channel(testenv.Context(t, 15*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	err = ch.ExchangeDeclarePassive(name, "topic", true, false, false, false, nil)
	if err == nil {
		return true
	}
	if strings.Contains(err.Error(), "NOT_FOUND") {
		return false
	}
	t.Fatalf("inspect exchange %s: %v", name, err)
	return false
}

func TestDemoInterruptedCleansUp(t *testing.T) {
	bin := demoBinary(t)
	b := testenv.Broker(t, mq.Config{Logger: testenv.Discard()})
	for _, tc := range []struct {
		name   string
		sig    syscall.Signal
		prefix string // "": the demo's own per-run prefix
	}{
		{"SIGINT", syscall.SIGINT, ""},
		{"SIGTERM", syscall.SIGTERM, testenv.Name(t) + "."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testenv.Context(t, 90*time.Second)
			cmd := exec.CommandContext(ctx, bin)
			cmd.Env = append(os.Environ(), "AMQP_URL="+testenv.URL(), "DEMO_NO_COLOR=1")
			if tc.prefix != "" {
				cmd.Env = append(cmd.Env, "DEMO_PREFIX="+tc.prefix)
			}
			var out syncBuffer
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			// Interrupt once it is consuming (shipping handled an order):
			// everything is declared by then.
			if !testenv.Poll(45*time.Second, func() bool { return strings.Contains(out.String(), "shipped") }) {
				_ = cmd.Process.Kill()
				<-done
				t.Fatalf("the demo never handled an order:\n%s", out.String())
			}
			queues, exchanges := demoNames(out.String())
			if len(queues) < 8 || len(exchanges) < 1 {
				t.Fatalf("the plan names %d queues, %d exchanges; want 8 and 1:\n%s", len(queues), len(exchanges), out.String())
			}
			for _, q := range queues {
				if q == "shipping.orders" || q == "billing.orders" || !strings.HasPrefix(q, tc.prefix) {
					t.Errorf("queue %s: want every name under a prefix (DEMO_PREFIX, or the demo's own per run)", q)
				}
			}
			if err := cmd.Process.Signal(tc.sig); err != nil {
				t.Fatal(err)
			}
			sent := time.Now()
			var err error
			select {
			case err = <-done:
			case <-time.After(45 * time.Second):
				_ = cmd.Process.Kill()
				<-done
				t.Fatalf("the demo did not end within 45 s of %v:\n%s", tc.sig, out.String())
			}
			t.Logf("exit %v %v after %v", err, tc.sig, time.Since(sent).Round(time.Millisecond))
			var ee *exec.ExitError
			if err == nil || !errors.As(err, &ee) {
				t.Errorf("the demo interrupted exited %v; want a non-zero exit (it did not finish)", err)
			}
			for _, q := range queues {
				if ok, err := b.QueueExists(ctx, q); err != nil || ok {
					t.Errorf("queue %s left behind after %v (exists=%v, err=%v)", q, tc.sig, ok, err)
				}
			}
			for _, x := range exchanges {
				if demoExchangeExists(t, b, x) {
					t.Errorf("exchange %s left behind after %v", x, tc.sig)
				}
			}
			if t.Failed() {
				sc := bufio.NewScanner(strings.NewReader(out.String()))
				for sc.Scan() {
					t.Log(sc.Text())
				}
			}
		})
	}
}

// A queue of the demo's name that somebody else declared (of the same
// shape, holding a message of theirs) is never consumed from or deleted by
// the demo: the demo refuses to run on names it did not create.
func TestDemoLeavesOthersQueuesAlone(t *testing.T) {
	bin := demoBinary(t)
	ctx := testenv.Context(t, 90*time.Second)
	b := testenv.Broker(t, mq.Config{Logger: testenv.Discard()})
	prefix := testenv.Name(t) + "."
	theirs := prefix + "shipping.orders"
	policy := retry.Waits(300*time.Millisecond, 600*time.Millisecond, time.Second, 2*time.Second).
		With(retry.InProcessLimit(800 * time.Millisecond))
	testenv.CleanupDerived(t, theirs, policy)
	testenv.Cleanup(t, prefix+"billing.orders", prefix+"billing.orders.dlq", prefix+"billing.orders.parked",
		prefix+"billing.orders.retry.1s", prefix+"billing.orders.retry.2s")
	testenv.CleanupExchanges(t, prefix+"orders-events")
	if err := b.Declare(ctx, topology.New().Queue(theirs, topology.DeadLetter(), topology.Retry(policy))); err != nil {
		t.Fatal(err)
	}
	testenv.Publish(t, b, theirs, mq.Message{MessageId: "theirs", Body: []byte("not an order")})

	cmd := exec.CommandContext(ctx, bin)
	cmd.Env = append(os.Environ(), "AMQP_URL="+testenv.URL(), "DEMO_PREFIX="+prefix, "DEMO_NO_COLOR=1")
	out, err := cmd.CombinedOutput()
	t.Logf("demo: %v", err)
	if err == nil {
		t.Errorf("the demo ran on a queue it did not create")
	}
	if !strings.Contains(string(out), theirs) {
		t.Errorf("the demo's output does not name the queue it found (%s)", theirs)
	}
	if ok, err := b.QueueExists(ctx, theirs); err != nil || !ok {
		t.Fatalf("somebody else's %s: exists=%v, err=%v; the demo deleted it\n%s", theirs, ok, err, out)
	}
	got := testenv.GetAll(t, b, theirs)
	if len(got) != 1 || got[0].MessageId != "theirs" {
		t.Errorf("somebody else's %s holds %d messages (want their 1, untouched)\n%s", theirs, len(got), out)
	}
	if ok, _ := b.QueueExists(ctx, prefix+"billing.orders"); ok {
		t.Errorf("the demo declared %sbilling.orders though it refused to run", prefix)
	}
}
