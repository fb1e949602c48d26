package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/acemq/acemq-go/ops"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func runCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestHelp(t *testing.T) {
	code, out, _ := runCLI(t, "--help")
	if code != exitOK {
		t.Fatalf("--help: exit %d", code)
	}
	for _, want := range []string{"count <queue> ...", "peek <queue>", "replay <queue>", "AMQP_URL"} {
		if !strings.Contains(out, want) {
			t.Errorf("help lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "guest:guest") {
		t.Errorf("help shows credentials:\n%s", out)
	}
	code, out, _ = runCLI(t, "replay", "--help")
	if code != exitOK || !strings.Contains(out, "--dry-run") || !strings.Contains(out, "--limit") || !strings.Contains(out, "--to") {
		t.Fatalf("replay --help: exit %d\n%s", code, out)
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
	} {
		code, _, errs := runCLI(t, args...)
		if code != exitUsage {
			t.Errorf("%q: exit %d, want %d (stderr %q)", args, code, exitUsage, errs)
		}
	}
}

func TestBrokerDown(t *testing.T) {
	for _, useEnv := range []bool{false, true} {
		const url = "amqp://ops:hunter2@127.0.0.1:1/"
		args := []string{"--timeout", "300ms", "count", "q"}
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
		if took := time.Since(began); took > 3*time.Second {
			t.Errorf("took %v with a 300ms timeout", took)
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
