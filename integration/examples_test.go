//go:build integration

package integration

// The examples a new user copies, run against the broker with their
// outcome checked, not only that they start: examples/service ships the
// orders it should, books each once and sets aside only the intended ones;
// examples/plain handles its five orders. (examples/orders, the demo, has
// demo_test.go.)

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/acemq/acemq-go/internal/testenv"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/retry"
)

// exampleBinary builds the example in dir and returns its path.
func exampleBinary(t *testing.T, ctx context.Context, dir string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), filepath.Base(dir))
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, dir).CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v\n%s", dir, err, out)
	}
	return bin
}

// syncBuffer is an output both the process and the test touch.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// The README's service in full, as a process: three orders that ship, one
// without an address. The shipped ones are announced as order.shipped on a
// topic exchange nobody in the service subscribes to — an event with no
// audience yet, which must not fail the order — each booked once; the one
// without an address is parked; nothing reaches .dlq.
func TestExampleServiceShipsEveryOrder(t *testing.T) {
	ctx := testenv.Context(t, 90*time.Second)
	bin := exampleBinary(t, ctx, "../examples/service")
	prefix := testenv.Name(t) + "."
	queue := prefix + "shipping.orders"
	testenv.CleanupDerived(t, queue, retry.Exponential(5, 10*time.Second))
	testenv.CleanupExchanges(t, prefix+"orders-events")

	db := outboxOpen(t, outboxURL())
	tables := outboxServiceTables(t, db) // its orders, shipments, outbox and inbox
	cmd := exec.CommandContext(ctx, bin)
	cmd.Env = append(os.Environ(), "AMQP_URL="+testenv.URL(), "SERVICE_PREFIX="+prefix, "LISTEN=127.0.0.1:0",
		"PG_URL="+outboxURL(), "SERVICE_TABLES="+tables)
	var out syncBuffer
	pr, pw := io.Pipe()
	cmd.Stderr, cmd.Stdout = io.MultiWriter(&out, pw), &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait(); pw.Close() }()
	defer func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-exited
		}
	}()
	addr := make(chan string, 1)
	go func() {
		listening := regexp.MustCompile(`msg=http.listening addr=(\S+)`)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			if m := listening.FindStringSubmatch(sc.Text()); m != nil {
				addr <- m[1]
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	var base string
	select {
	case a := <-addr:
		base = "http://" + a
	case err := <-exited:
		t.Fatalf("the service exited before it listened: %v\n%s", err, out.String())
	case <-ctx.Done():
		t.Fatalf("the service did not listen\n%s", out.String())
	}
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get(base + "/readyz")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("readyz: %v %v\n%s", resp, err, out.String())
	}
	resp.Body.Close()
	shipped := []string{"o-1", "o-2", "o-3"}
	for _, body := range []string{
		`{"id":"o-1","address":"1 Main St","items":2}`,
		`{"id":"o-2","address":"2 Main St","items":1}`,
		`{"id":"o-3","address":"3 Main St","items":10}`,
		`{"id":"o-4","items":1}`,
		`{"id":"o-1","address":"1 Main St","items":2}`, // a client's retry: stored once, shipped once
	} {
		resp, err := client.Post(base+"/orders", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("POST /orders %s: %s", body, resp.Status)
		}
	}
	b := testenv.Broker(t, mq.Config{Logger: testenv.Discard()})
	testenv.WaitCount(t, b, queue+".parked", 1, 20*time.Second)
	allShipped := func() bool {
		text := out.String()
		for _, id := range shipped {
			if !strings.Contains(text, "msg=shipping.shipped order="+id) {
				return false
			}
		}
		return true
	}
	if !testenv.Poll(15*time.Second, allShipped) {
		t.Fatalf("not every order was shipped within 15 s:\n%s", out.String())
	}
	text := out.String()
	for _, id := range shipped {
		if n := strings.Count(text, "msg=shipping.booked order="+id+" "); n != 1 {
			t.Errorf("order %s booked %d times, want once", id, n)
		}
	}
	if strings.Contains(text, "unroutable") {
		t.Errorf("a publish came back unroutable:\n%s", text)
	}
	// order.shipped has no audience: an event, dropped by the broker and
	// its row deleted (no option asks for that: the topology's topic
	// exchange does).
	testenv.Eventually(t, 10*time.Second, func() bool { return outboxCount(t, db, tables+"outbox", "") == 0 },
		"the service's outbox drained, order.shipped dropped unbound")
	if n := outboxCount(t, db, tables+"shipments", ""); n != len(shipped) {
		t.Errorf("%d shipments recorded, want %d", n, len(shipped))
	}
	if n := testenv.Count(t, b, queue+".dlq"); n != 0 {
		t.Errorf("%d messages in %s.dlq, want 0", n, queue)
	}
	if n := testenv.Count(t, b, queue); n != 0 {
		t.Errorf("%d messages left in %s", n, queue)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("the service's stop: %v\n%s", err, out.String())
		}
	case <-ctx.Done():
		t.Fatal("the service did not stop on SIGTERM")
	}
}

// The README's "Without fx", in full (examples/plain): four orders shipped,
// the flaky one on its third attempt, the malformed one parked, and
// nothing left behind.
func TestExamplePlainHandlesItsOrders(t *testing.T) {
	ctx := testenv.Context(t, 90*time.Second)
	bin := exampleBinary(t, ctx, "../examples/plain")
	prefix := testenv.Name(t) + "."
	queue := prefix + "plain.orders"
	testenv.CleanupDerived(t, queue, retry.Waits(100*time.Millisecond, 200*time.Millisecond))
	cmd := exec.CommandContext(ctx, bin)
	cmd.Env = append(os.Environ(), "AMQP_URL="+testenv.URL(), "PLAIN_PREFIX="+prefix)
	raw, err := cmd.CombinedOutput()
	text := regexp.MustCompile("\x1b\\[[0-9;]*m").ReplaceAllString(string(raw), "")
	if err != nil {
		t.Fatalf("the example failed: %v\n%s", err, text)
	}
	for _, want := range []string{
		"order shipped order=order-1 attempt=1",
		"order shipped order=flaky-2 attempt=3",
		"order shipped order=order-3 attempt=1",
		"order shipped order=order-5 attempt=1",
		"outcome=park",
		"done parked=1",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the output does not show %q:\n%s", want, text)
		}
	}
	if n := strings.Count(text, "order shipped"); n != 4 {
		t.Errorf("%d orders shipped, want 4", n)
	}
	b := testenv.Broker(t, mq.Config{Logger: testenv.Discard()})
	for _, q := range []string{queue, queue + ".dlq", queue + ".parked"} {
		if ok, err := b.QueueExists(ctx, q); err != nil || ok {
			t.Errorf("queue %s left behind (exists=%v, err=%v)", q, ok, err)
		}
	}
}
