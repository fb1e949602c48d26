//go:build integration

package integration

// `acemq console` end to end: the built command refuses a non-loopback
// address without a token (before it dials the broker), serves the page on
// loopback, asks for the token where one is given, and stops on SIGINT.

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/acemq/acemq-go/internal/testenv"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/topology"
)

var servingLine = regexp.MustCompile(`console on (http://127\.0\.0\.1:\d+/)|console on http://(\[::\]|0\.0\.0\.0):(\d+)/`)

// consoleServe starts `acemq console args...` and returns the page's URL
// once it serves, and what it wrote to stderr so far (logs); the process
// is stopped with SIGINT (and must exit 0) when stop is called.
func consoleServe(t *testing.T, args ...string) (base string, stop func(), logs func() string) {
	t.Helper()
	cmd := exec.Command(acemqCLI(t), append([]string{"console"}, args...)...)
	cmd.Env = append(os.Environ(), "AMQP_URL="+testenv.URL(), "ACEMQ_CONSOLE_TOKEN=")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &lockedBuffer{}
	cmd.Stderr = stderr
	logs = stderr.String
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
			}
		}
		close(lines)
	}()
	done := make(chan error, 1)
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		_ = cmd.Process.Signal(syscall.SIGINT)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("acemq console after SIGINT: %v\n%s", err, stderr.String())
			}
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			t.Errorf("acemq console did not stop within 15 s of SIGINT\n%s", stderr.String())
		}
		if strings.Contains(stderr.String(), "guest:guest") {
			t.Errorf("acemq console printed credentials:\n%s", stderr.String())
		}
	}
	t.Cleanup(stop)
	select {
	case line := <-lines:
		m := servingLine.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("acemq console printed %q\n%s", line, stderr.String())
		}
		if m[1] != "" {
			return m[1], stop, logs
		}
		return "http://127.0.0.1:" + m[3] + "/", stop, logs
	case <-time.After(20 * time.Second):
		t.Fatalf("acemq console did not serve within 20 s\n%s", stderr.String())
	}
	return "", stop, logs
}

// lockedBuffer is a bytes.Buffer a process writes to while the test reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// consoleGet GETs url (with bearer as the Authorization token, if any)
// and returns the status and the body.
func consoleGet(t testing.TB, url, bearer string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func TestConsoleCommand(t *testing.T) {
	b := testenv.Broker(t, mq.Config{})
	q := consoleQueue(t, b)
	consoleFill(t, b, q, 3)

	// Refused before the broker is dialled: a broker URL that answers
	// nothing changes nothing.
	cmd := exec.Command(acemqCLI(t), "console", "--listen", "0.0.0.0:8089", q)
	cmd.Env = append(os.Environ(), "AMQP_URL=amqp://guest:guest@"+testenv.ClosedAddr(t)+"/", "ACEMQ_CONSOLE_TOKEN=")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), "not a loopback address") {
		t.Fatalf("--listen 0.0.0.0:8089 without a token: %v\n%s", err, out)
	}

	base, stop, _ := consoleServe(t, "--listen", "127.0.0.1:0", q)
	code, page := consoleGet(t, base, "")
	if code != http.StatusOK || !strings.Contains(page, `data-count="dlq">3</a>`) {
		t.Fatalf("GET %s: %d\n%s", base, code, page)
	}
	stop()

	tbase, tstop, _ := consoleServe(t, "--listen", "0.0.0.0:0", "--token", "t0ken-of-this-test", q)
	if code, _ := consoleGet(t, tbase, ""); code != http.StatusUnauthorized {
		t.Errorf("GET without the token: %d, want 401", code)
	}
	if code, page := consoleGet(t, tbase, "t0ken-of-this-test"); code != http.StatusOK || strings.Contains(page, "t0ken") {
		t.Errorf("GET with the token: %d (the page must not show the token)\n%s", code, page)
	}
	tstop()
}

// Issue 24 item 4: the standalone console logs every operator action
// (replay, delete, purge) to stderr, as a mounted one logs them to its
// service's logger, without -v.
func TestConsoleCommandLogsActions(t *testing.T) {
	b := testenv.Broker(t, mq.Config{})
	q := consoleQueue(t, b)
	dlq := topology.DeadLetterQueue(q)
	consoleFill(t, b, q, 6)
	base, stop, logs := consoleServe(t, "--listen", "127.0.0.1:0", q)
	base = strings.TrimSuffix(base, "/")
	page := "/queues/" + url.PathEscape(q) + "/dlq"
	token := consoleCSRF(t, base, page)
	_, body := consoleGet(t, base+page, "")
	g := groupLink.FindStringSubmatch(body)
	if g == nil {
		t.Fatalf("no group on the queue's page:\n%s", body)
	}
	_, body = consoleGet(t, base+g[1], "")
	m := messageLink.FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no message on the group's page:\n%s", body)
	}
	if code, _ := consolePost(t, base+page+"/delete", url.Values{"csrf": {token}, "key": {m[1]}}); code != http.StatusSeeOther {
		t.Fatalf("delete: %d", code)
	}
	code, loc := consolePost(t, base+page+"/replay", url.Values{"csrf": {token}, "scope": {"all"}})
	j := jobLink.FindStringSubmatch(loc)
	if code != http.StatusSeeOther || j == nil {
		t.Fatalf("replay: %d %q", code, loc)
	}
	consoleJobState(t, base, j[1])
	testenv.Publish(t, b, dlq, opsDeadLetters(q, 2)...)
	testenv.WaitCount(t, b, dlq, 2, 10*time.Second)
	if code, _ := consolePost(t, base+page+"/purge", url.Values{"csrf": {token}, "confirm": {dlq}}); code != http.StatusSeeOther {
		t.Fatalf("purge: %d", code)
	}
	stop()
	out := logs()
	for _, want := range []string{"acemq.console.deleted", "acemq.console.replay.started", "acemq.console.replay.done", "acemq.console.purged"} {
		if !strings.Contains(out, want) || !strings.Contains(out, dlq) {
			t.Errorf("the console's stderr has no %s naming %s:\n%s", want, dlq, out)
		}
	}
	if strings.Contains(out, "acemq.connection.open") {
		t.Errorf("connection logs without -v:\n%s", out)
	}
}
