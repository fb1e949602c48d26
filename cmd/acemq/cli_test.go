package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/ops"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func runCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), args, strings.NewReader(""), &out, &errb)
	return code, out.String(), errb.String()
}

func TestHelp(t *testing.T) {
	code, out, _ := runCLI(t, "--help")
	if code != exitOK {
		t.Fatalf("--help: exit %d", code)
	}
	for _, want := range []string{"count <queue> ...", "peek <queue>", "replay <queue>", "purge <queue>", "delete <queue> <message-id>", "AMQP_URL",
		"Exit codes:", "2    usage error", "3    the broker could not be reached", "6    the broker refused the login", "go install", "publish <routing-key>", "--json", "--wait"} {
		if !strings.Contains(out, want) {
			t.Errorf("help lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "guest:guest") {
		t.Errorf("help shows credentials:\n%s", out)
	}
	code, out, _ = runCLI(t, "replay", "--help")
	if code != exitOK || !strings.Contains(out, "--dry-run") || !strings.Contains(out, "-n, --limit") || !strings.Contains(out, "--to") ||
		!strings.Contains(out, "--older-than") || !strings.Contains(out, "--reason") {
		t.Fatalf("replay --help: exit %d\n%s", code, out)
	}
	code, out, _ = runCLI(t, "peek", "--help")
	if code != exitOK || !strings.Contains(out, "-n, --limit=10") || strings.Contains(out, "--n=") || !strings.Contains(out, "--message-id") {
		t.Fatalf("peek --help: exit %d\n%s", code, out)
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"bogus"},
		{"count"},
		{"peek"},
		{"peek", "q", "-n", "x"},
		{"replay"},
		{"replay", "q.dlq", "--limit", "many"},
		{"--timeout", "soon", "count", "q"},
		{"--url", "http://foo", "count", "q"},
		{"delete", "q"},
	} {
		code, out, errs := runCLI(t, args...)
		if code != exitUsage {
			t.Errorf("%q: exit %d, want %d (stderr %q)", args, code, exitUsage, errs)
		}
		if !strings.HasPrefix(errs, "acemq: ") || strings.Count(errs, "\n") != 1 || strings.Contains(errs, "Config.URLs") {
			t.Errorf("%q: stderr %q, want one plain line starting acemq:", args, errs)
		}
		if out != "" {
			t.Errorf("%q: stdout %q, want nothing", args, out)
		}
	}
	// --json: the usage error as a JSON object too.
	code, out, _ := runCLI(t, "--json", "count")
	var v map[string]any
	if code != exitUsage || json.Unmarshal([]byte(out), &v) != nil || v["exit"] != float64(exitUsage) || v["error"] == "" {
		t.Errorf("--json usage error: exit %d, stdout %q", code, out)
	}
}

func TestBrokerDown(t *testing.T) {
	for _, useEnv := range []bool{false, true} {
		const url = "amqp://ops:hunter2@127.0.0.1:1/"
		args := []string{"--timeout", "5s", "count", "q"}
		if useEnv {
			t.Setenv("AMQP_URL", url)
		} else {
			args = append([]string{"--url", url}, args...)
		}
		began := time.Now()
		code, out, errs := runCLI(t, args...)
		if code != exitNoBroker {
			t.Fatalf("env=%v: exit %d, want %d\nstdout %s\nstderr %s", useEnv, code, exitNoBroker, out, errs)
		}
		if took := time.Since(began); took > time.Second {
			t.Errorf("took %v: a refused connection should fail at once, not after --timeout", took)
		}
		if strings.Count(errs, "\n") != 1 || !strings.HasPrefix(errs, "acemq: cannot reach the broker") || !strings.Contains(errs, "connection refused") ||
			strings.Contains(errs, "acemq.connection") {
			t.Errorf("stderr %q, want one plain line naming the refusal", errs)
		}
		if strings.Contains(out+errs, "hunter2") {
			t.Errorf("the password was printed:\n%s%s", out, errs)
		}
		if !strings.Contains(errs, "ops:xxxxx@127.0.0.1:1") {
			t.Errorf("stderr does not name the (redacted) broker:\n%s", errs)
		}
	}
}

func TestPrintReplay(t *testing.T) {
	var b bytes.Buffer
	printReplay(&b, ops.ReplayResult{From: "orders.dlq", Total: 5, Moved: 4,
		Targets: map[string]int{"orders": 3, "billing": 1},
		Skipped: []ops.Skipped{{MessageId: "m9", Err: errors.New("no source")}}})
	want := "moved 4 of 5 message(s) from orders.dlq: 1 to billing, 3 to orders\n  left in orders.dlq: message m9: no source\n"
	if b.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", b.String(), want)
	}
	b.Reset()
	printReplay(&b, ops.ReplayResult{From: "q.parked", DryRun: true, Total: 2, Moved: 2, Targets: map[string]int{"q": 2}})
	if got := b.String(); got != "dry run: would move 2 of 2 message(s) from q.parked: 2 to q\n" {
		t.Fatalf("dry run: %q", got)
	}
}

func TestUnknownHostFailsFast(t *testing.T) {
	began := time.Now()
	code, _, errs := runCLI(t, "--url", "amqp://guest:pw@no-such-host.invalid:5672/", "--timeout", "5s", "count", "q")
	if code != exitNoBroker || !strings.Contains(errs, `unknown host "no-such-host.invalid"`) {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	if took := time.Since(began); took > 3*time.Second {
		t.Errorf("took %v", took)
	}
}

// With --wait a refused connection is retried until --timeout.
func TestWaitRetries(t *testing.T) {
	began := time.Now()
	code, _, errs := runCLI(t, "--url", "amqp://guest:pw@127.0.0.1:1/", "--wait", "--timeout", "700ms", "count", "q")
	took := time.Since(began)
	if code != exitNoBroker || took < 600*time.Millisecond || !strings.Contains(errs, "within 700ms") {
		t.Fatalf("exit %d after %v, stderr %q", code, took, errs)
	}
}

func TestPrintPeeked(t *testing.T) {
	var b bytes.Buffer
	printPeeked(&b, ops.Peeked{Position: 1, MessageId: "m", Attempt: 6, AttemptsUsed: 5, RoutingKey: "orders.dlq",
		OriginalExchange: "shop", OriginalRoutingKey: "order.placed", RouteFrom: "x-acemq-original-exchange / -routing-key",
		Headers: amqp.Table{mq.HeaderOriginalRoutingKey: "order.placed", mq.HeaderOriginalExchange: "shop", mq.HeaderAttempt: int32(6)}})
	out := b.String()
	for _, want := range []string{"attempts used:   5\n", "routing key:     order.placed\n", "exchange:        shop\n", "route from:      x-acemq-original"} {
		if !strings.Contains(out, want) {
			t.Errorf("printed no %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "attempt: ") || strings.Contains(out, "x-acemq-original-exchange: ") {
		t.Errorf("a contract header printed twice:\n%s", out)
	}
	b.Reset()
	printPeeked(&b, ops.Peeked{Position: 1, AttemptsUsed: -1, RouteFrom: "the delivery's own"})
	if out := b.String(); !strings.Contains(out, "attempts used:   unknown") || !strings.Contains(out, "exchange:        (default exchange)\n") {
		t.Errorf("unknown attempts, default exchange:\n%s", out)
	}
	if r := peekRow(ops.Peeked{AttemptsUsed: -1}); r.AttemptsUsed != nil {
		t.Errorf("attempts_used %d, want null when unknown", *r.AttemptsUsed)
	}
	if r := peekRow(ops.Peeked{AttemptsUsed: 0}); r.AttemptsUsed == nil || *r.AttemptsUsed != 0 {
		t.Errorf("attempts_used %v, want 0", r.AttemptsUsed)
	}
}

// Issue 22 item 10: every spelling kong accepts for --json gives JSON, on
// a failure as on a success; --json=false gives the text.
func TestJSONSpellings(t *testing.T) {
	for _, spelling := range []string{"--json", "--json=true", "--json=1"} {
		for _, args := range [][]string{
			{spelling, "count"}, // usage error
			{spelling, "--url", "amqp://guest:pw@127.0.0.1:1/", "count", "q"}, // broker down
		} {
			code, out, _ := runCLI(t, args...)
			var v map[string]any
			if err := json.Unmarshal([]byte(out), &v); err != nil || v["exit"] != float64(code) {
				t.Errorf("%q: exit %d, stdout %q: want one JSON object with its exit code", args, code, out)
			}
		}
	}
	code, out, _ := runCLI(t, "--json=false", "--url", "amqp://guest:pw@127.0.0.1:1/", "count", "q")
	if code != exitNoBroker || out != "" {
		t.Errorf("--json=false: exit %d, stdout %q; want %d and no JSON", code, out, exitNoBroker)
	}
}

// Issue 22 item 9: nothing a message carries reaches the terminal as a
// control sequence: id, reason, source queue, route, header names and
// values, the body, a replay's skipped ids.
func TestPrintPeekedSanitizes(t *testing.T) {
	const esc = "\x1b[1A\x1b[2K\x1b]0;pwned\x07\u009b31m"
	var b bytes.Buffer
	printPeeked(&b, ops.Peeked{Position: 1, MessageId: "id" + esc, ContentType: "text/" + esc, AttemptsUsed: 2,
		OriginalExchange: "ex" + esc, OriginalRoutingKey: "key" + esc, RouteFrom: "from" + esc,
		SourceQueue: "src" + esc, Reason: "why" + esc, Error: "err" + esc, ReplayedFrom: "rf" + esc,
		Headers: amqp.Table{"name" + esc: "value" + esc, "bytes": []byte("b" + esc)},
		Body:    []byte("body" + esc), Preview: ops.Preview([]byte("body"+esc), 256)})
	printReplay(&b, ops.ReplayResult{From: "q.dlq", Total: 1, Skipped: []ops.Skipped{{MessageId: "m" + esc, Err: errors.New("no source" + esc)}}})
	assertPrintable(t, b.String())
	if !strings.Contains(b.String(), `id\x1b[1A`) {
		t.Errorf("the id's escape is not shown escaped:\n%s", b.String())
	}
}

// assertPrintable fails on any control character but a newline.
func assertPrintable(t *testing.T, s string) {
	t.Helper()
	n := 0
	for _, r := range s {
		if r != '\n' && (r < 0x20 || (r >= 0x7f && r <= 0x9f)) {
			n++
		}
	}
	if n > 0 {
		t.Errorf("%d control characters reached the output:\n%q", n, s)
	}
}

// Issue 39 item 8: peek --json writes a table or array header (x-death,
// the broker's record of each dead-lettering) as nested JSON, not as Go's
// formatting of it in a string, and does not cut it short.
func TestPeekJSONNestedHeaders(t *testing.T) {
	at := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	long := strings.Repeat("k", 300)
	row := peekRow(ops.Peeked{AttemptsUsed: -1, Headers: amqp.Table{
		"x-death": []any{amqp.Table{"count": int64(2), "queue": "orders", "reason": "rejected", "time": at,
			"routing-keys": []any{"order.placed"}, "blob": []byte("raw")}},
		"x-tenant": "acme",
		"x-long":   long,
	}})
	raw, err := json.Marshal(row)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Headers map[string]any `json:"headers"`
	}
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	deaths, ok := got.Headers["x-death"].([]any)
	if !ok || len(deaths) != 1 {
		t.Fatalf("x-death %#v (%s), want a JSON array", got.Headers["x-death"], raw)
	}
	d, ok := deaths[0].(map[string]any)
	if !ok || d["count"] != float64(2) || d["queue"] != "orders" || d["reason"] != "rejected" || d["time"] != "2026-12-06T10:00:00Z" || d["blob"] != "raw" {
		t.Fatalf("x-death[0] %#v, want a JSON object of its fields", deaths[0])
	}
	if keys, ok := d["routing-keys"].([]any); !ok || len(keys) != 1 || keys[0] != "order.placed" {
		t.Fatalf("routing-keys %#v, want a JSON array", d["routing-keys"])
	}
	if got.Headers["x-tenant"] != "acme" || got.Headers["x-long"] != long {
		t.Fatalf("plain headers %v, want them whole", got.Headers)
	}
}

// Issue 39 item 8: an empty queue name is a usage error (exit 2), in every
// command that takes one.
func TestEmptyQueueNameIsAUsageError(t *testing.T) {
	for _, args := range [][]string{
		{"count", ""},
		{"count", "q", ""},
		{"peek", ""},
		{"replay", ""},
		{"delete", "", "m-1", "--yes"},
		{"console", "q", ""},
		{"purge", "", "--yes"},
	} {
		code, out, errs := runCLI(t, append([]string{"--url", "amqp://guest:pw@127.0.0.1:1/"}, args...)...)
		if code != exitUsage || out != "" || !strings.Contains(errs, "empty") {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want %d and a line naming the empty name", args, code, out, errs, exitUsage)
		}
	}
}
