//go:build integration

package integration

// A second Ctrl-C ends acemq at once, also while the first one waits for
// a replay's move on a broker that blocks publishing (it used to be
// swallowed: the command waited out the move's 30 s).

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/acemq/acemq-go/internal/testenv"
	"github.com/acemq/acemq-go/mq"
)

func TestCLISecondInterruptExits(t *testing.T) {
	b := testenv.Broker(t, mq.Config{})
	q, dlq, _ := opsSetup(t, b)
	testenv.Publish(t, b, dlq, opsDeadLetters(q, 5)...)
	testenv.WaitCount(t, b, dlq, 5, 10*time.Second)
	proxy, url := testenv.Proxy(t)
	proxy.BlockAfterHandshake("goit: publishing blocked")

	cmd := exec.Command(acemqCLI(t), "replay", dlq)
	cmd.Env = append(os.Environ(), "AMQP_URL="+url)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	// The replay took its first message and waits to republish it.
	testenv.Eventually(t, 20*time.Second, func() bool { return proxy.Sent(60, 70) >= 1 }, "the replay to take a message")
	time.Sleep(300 * time.Millisecond)
	_ = cmd.Process.Signal(syscall.SIGINT)
	select {
	case err := <-done:
		t.Fatalf("exited on the first SIGINT (%v): the move it waits for is given its time\n%s%s", err, out.String(), errb.String())
	case <-time.After(500 * time.Millisecond):
	}
	_ = cmd.Process.Signal(syscall.SIGINT)
	code, took := exitOf(cmd, done)
	if took > 2*time.Second || code != 130 {
		t.Errorf("after the second SIGINT: exit %d after %v, want 130 at once\n%s%s", code, took.Round(100*time.Millisecond), out.String(), errb.String())
	}
	if !strings.Contains(errb.String(), "interrupted again") {
		t.Errorf("stderr does not say why it exits at once:\n%s", errb.String())
	}
	proxy.BlockAfterHandshake("")
	proxy.Cut()
	testenv.WaitCount(t, b, dlq, 5, 20*time.Second) // nothing lost: the taken message went back
}

// Ctrl-C ends a command at once also when the network has gone quiet
// under it (issue 22 item 7: amqp091's calls wait for the heartbeat).
func TestCLIInterruptOnAQuietNetwork(t *testing.T) {
	b := testenv.Broker(t, mq.Config{})
	q, dlq, _ := opsSetup(t, b)
	testenv.Publish(t, b, dlq, opsDeadLetters(q, 200)...)
	testenv.WaitCount(t, b, dlq, 200, 10*time.Second)
	proxy, url := testenv.Proxy(t)

	cmd := exec.Command(acemqCLI(t), "peek", dlq, "-n", "200")
	cmd.Env = append(os.Environ(), "AMQP_URL="+url)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	testenv.Eventually(t, 20*time.Second, func() bool { return proxy.Sent(60, 70) >= 10 }, "the peek to take messages")
	proxy.Stall(true, true)
	time.Sleep(200 * time.Millisecond)
	_ = cmd.Process.Signal(syscall.SIGINT)
	code, took := exitOf(cmd, done)
	if took > 3*time.Second || code != 130 {
		t.Errorf("peek on a quiet network, after SIGINT: exit %d after %v, want 130 within 3 s\n%s%s", code, took.Round(100*time.Millisecond), out.String(), errb.String())
	}
	proxy.Stall(false, false)
	proxy.Cut()
	testenv.WaitCount(t, b, dlq, 200, 30*time.Second)
}

// exitOf waits for cmd (whose Wait reports on done) to exit, killing it
// after 40 s, and returns its exit code and how long it took from now.
func exitOf(cmd *exec.Cmd, done <-chan error) (int, time.Duration) {
	began := time.Now()
	var err error
	select {
	case err = <-done:
	case <-time.After(40 * time.Second):
		_ = cmd.Process.Kill()
		err = <-done
	}
	took := time.Since(began)
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), took
	}
	return 0, took
}
