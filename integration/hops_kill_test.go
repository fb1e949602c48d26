//go:build integration

package integration

// Defect 5 of issue 38 with a kill -9: the process that owes a refused
// set-aside dies without a word, and the next one must still not hand the
// message to the handler.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/acemq/acemq-go/internal/testenv"
	"github.com/acemq/acemq-go/middleware"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/retry"
	"github.com/acemq/acemq-go/topology"
)

// hopsKillChildEnv, when set (URL, queue), makes the test binary a
// consumer of the queue whose handler always fails, and nothing else: it
// prints "call <attempt>" for each handler call, and its log records.
const hopsKillChildEnv = "GOIT_HOPS_KILL_CHILD"

// hopsKillPolicy is the child's policy: three attempts, in-process.
var hopsKillPolicy = retry.Waits(10*time.Millisecond, 10*time.Millisecond)

func init() {
	v := os.Getenv(hopsKillChildEnv)
	if v == "" {
		return
	}
	os.Exit(hopsKillChild(strings.Split(v, "\n")))
}

func hopsKillChild(args []string) int {
	ctx, stop := signalContext()
	defer stop()
	var mu sync.Mutex
	out := func(s string) { mu.Lock(); fmt.Println(s); mu.Unlock() }
	b := mq.New(mq.Config{URLs: []string{args[0]}, ConnectionName: "goit.hops.kill-child",
		Logger: slog.New(slog.NewTextHandler(os.Stdout, nil))})
	sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := b.Start(sctx); err != nil {
		fmt.Fprintln(os.Stderr, "child consumer: broker:", err)
		return 2
	}
	h := mq.HandlerFunc(func(_ context.Context, d *mq.Delivery) error {
		out(fmt.Sprintf("call %d", d.Attempt()))
		return fmt.Errorf("fails on attempt %d", d.Attempt())
	})
	if _, err := b.Consume(sctx, args[1], h, middleware.Standard(hopsKillPolicy, middleware.WithoutDeclare()),
		mq.WithRequeuePause(50*time.Millisecond)); err != nil {
		fmt.Fprintln(os.Stderr, "child consumer:", err)
		return 2
	}
	out("consuming")
	<-ctx.Done()
	_ = b.Close(context.Background())
	return 0
}

// hopsChild is a running child consumer and what it printed so far.
type hopsChild struct {
	cmd  *exec.Cmd
	done chan struct{}
	mu   sync.Mutex
	out  []string
}

func startHopsChild(t *testing.T, q string) *hopsChild {
	t.Helper()
	c := &hopsChild{cmd: exec.Command(os.Args[0], "-test.run=^$"), done: make(chan struct{})}
	c.cmd.Env = append(os.Environ(), hopsKillChildEnv+"="+testenv.URL()+"\n"+q)
	c.cmd.Stderr = os.Stderr
	stdout, err := c.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			c.mu.Lock()
			c.out = append(c.out, sc.Text())
			c.mu.Unlock()
		}
		_, _ = io.Copy(io.Discard, stdout)
		_ = c.cmd.Wait()
		close(c.done)
	}()
	t.Cleanup(c.kill)
	if !testenv.Poll(30*time.Second, func() bool { return c.count("consuming") > 0 }) {
		t.Fatalf("the child consumer did not start: %q", c.lines())
	}
	return c
}

// count is how many lines the child printed that contain s.
func (c *hopsChild) count(s string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, l := range c.out {
		if strings.Contains(l, s) {
			n++
		}
	}
	return n
}

// calls are the child's handler calls ("call <attempt>").
func (c *hopsChild) calls() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, l := range c.out {
		if strings.HasPrefix(l, "call ") {
			out = append(out, l)
		}
	}
	return out
}

func (c *hopsChild) lines() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.out...)
}

// kill sends SIGKILL and waits for the process to end.
func (c *hopsChild) kill() {
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	<-c.done
}

func TestHopsRefusedAsideSurvivesAKill(t *testing.T) {
	b, _ := consBroker(t)
	q := testenv.Queue(t, b, hopsKillPolicy) // quorum
	dlq := topology.DeadLetterQueue(q)
	accept := refusing(t, b, topology.Queue{Name: dlq, Durable: true})
	first := startHopsChild(t, q)
	testenv.Publish(t, b, q, mq.Message{Body: []byte("x"), MessageId: "aside-kill"})
	if !testenv.Poll(30*time.Second, func() bool { return first.count(mq.EventSetAsideFailed) >= 2 }) {
		t.Fatalf("the first child: no second refused set-aside within 30 s: %q", first.lines())
	}
	first.kill()
	if got := first.calls(); strings.Join(got, ",") != "call 1,call 2,call 3" {
		t.Fatalf("the first child's handler calls: %q, want attempts 1 2 3", got)
	}

	second := startHopsChild(t, q)
	if !testenv.Poll(30*time.Second, func() bool { return second.count(mq.EventSetAsideFailed) >= 2 || len(second.calls()) > 0 }) {
		t.Fatalf("the second child: within 30 s neither a refused set-aside nor a call: %q", second.lines())
	}
	if got := second.calls(); len(got) > 0 {
		t.Fatalf("after a kill -9 the next process called the handler: %q, want no call", got)
	}
	accept()
	testenv.WaitCount(t, b, dlq, 1, 30*time.Second)
	// A stop, not a kill: a kill between the confirmed set-aside and its
	// ack would leave a duplicate in q, as any hop may (at least once).
	if err := second.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-second.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the second child did not stop")
	}
	if got := second.calls(); len(got) > 0 {
		t.Fatalf("the second child called the handler: %q", got)
	}
	got := testenv.GetAll(t, b, dlq)
	if len(got) != 1 || mq.AttemptOf(got[0].Headers) != 4 || got[0].Headers[mq.HeaderError] != "fails on attempt 3" {
		t.Fatalf("%s: %v, want one message, attempt 4, the third attempt's error", dlq, headersOf(got))
	}
	if n := testenv.Count(t, b, q); n != 0 {
		t.Errorf("%s still holds %d messages: %v", q, n, headersOf(testenv.GetAll(t, b, q)))
	}
}
