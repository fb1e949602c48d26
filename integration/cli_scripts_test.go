//go:build integration

package integration

// Issue 24 item 6, the CLI for scripts, through the built binary: one
// wording for a missing queue, a refused login with its own exit code at
// once, and acemq publish.

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq-go/internal/testenv"
	"github.com/acemq/acemq-go/mq"
)

func TestCLIMissingQueueOneWording(t *testing.T) {
	missing := testenv.Name(t, "missing")
	want := `acemq: queue "` + missing + `" does not exist` + "\n"
	for _, args := range [][]string{
		{"count", missing},
		{"peek", missing},
		{"peek", missing, "--reason", "rejected"},
		{"replay", missing},
		{"purge", missing, "--yes"},
		{"delete", missing, "some-id", "--yes"},
	} {
		code, out, errs := cliRun(t, "", args...)
		if code != 1 || errs != want {
			t.Errorf("%v: exit %d, stderr %q; want 1 and %q (stdout %q)", args, code, errs, want, out)
		}
	}
}

func TestCLILoginRefused(t *testing.T) {
	u := strings.Replace(testenv.URL(), "guest:guest@", "guest:wrong-password@", 1)
	if u == testenv.URL() {
		t.Fatalf("AMQP_URL %s has no guest:guest@ to replace", mq.Redact(u))
	}
	for _, tc := range []struct{ url, want string }{
		{u, "refused the login"},
		{strings.TrimSuffix(testenv.URL(), "/") + "/goit-no-such-vhost", "refused the login"},
	} {
		for _, extra := range [][]string{nil, {"--wait"}} {
			began := time.Now()
			code, _, errs := cliRun(t, "", append(append([]string{"--url", tc.url, "--timeout", "20s"}, extra...), "count", "q")...)
			took := time.Since(began)
			// RabbitMQ answers a wrong password after 3 s (it does not tell
			// clients that do not say they understand it, and amqp091-go
			// does not); a missing vhost at once.
			if code != 6 || !strings.Contains(errs, tc.want) || strings.Contains(errs, "within") || strings.Contains(errs, "wrong-password") {
				t.Errorf("%s %v: exit %d, stderr %q; want 6 and %q", mq.Redact(tc.url), extra, code, errs, tc.want)
			}
			if took > 6*time.Second {
				t.Errorf("%s %v: took %v; want the refusal when the broker says it, not after --timeout", mq.Redact(tc.url), extra, took)
			}
		}
	}
}

func TestCLIPublish(t *testing.T) {
	b := testenv.Broker(t, mq.Config{})
	q, _, _ := opsSetup(t, b)

	// From stdin, with properties and headers, JSON out.
	code, v, errs := cliJSON(t, `{"order":42}`, "publish", q, "--content-type", "application/json", "--message-id", "cli-1",
		"--correlation-id", "c-1", "--type", "order.placed", "--app-id", "ops", "--priority", "3",
		"-H", "x-tenant=acme", "-H", "x-note=a=b,c", "--transient")
	if code != 0 || v["outcome"] != "confirmed" || v["message_id"] != "cli-1" || v["bytes"] != float64(12) || v["routing_key"] != q {
		t.Fatalf("publish --json: exit %d, %v, stderr %q", code, v, errs)
	}
	// From a file, text out, a message id made up and printed.
	file := filepath.Join(t.TempDir(), "body.bin")
	if err := os.WriteFile(file, []byte("from a file"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errs := cliRun(t, "", "publish", q, "--file", file)
	if code != 0 || !strings.Contains(out, "confirmed") || !strings.Contains(out, "11 bytes") {
		t.Fatalf("publish --file: exit %d\n%s\nstderr %q", code, out, errs)
	}
	got := testenv.GetAll(t, b, q)
	if len(got) != 2 {
		t.Fatalf("%d messages in %s, want 2", len(got), q)
	}
	if string(got[0].Body) != `{"order":42}` {
		got[0], got[1] = got[1], got[0] // a quorum queue on 4.x delivers by priority band, not strictly in order
	}
	d := got[0]
	if string(d.Body) != `{"order":42}` || d.ContentType != "application/json" || d.MessageId != "cli-1" || d.CorrelationId != "c-1" ||
		d.Type != "order.placed" || d.AppId != "ops" || d.Priority != 3 || d.DeliveryMode != 1 ||
		d.Headers["x-tenant"] != "acme" || d.Headers["x-note"] != "a=b,c" || d.Timestamp.IsZero() {
		t.Errorf("the first message as published: %+v", d)
	}
	if string(got[1].Body) != "from a file" || got[1].MessageId == "" || !strings.Contains(out, got[1].MessageId) || got[1].DeliveryMode != 2 {
		t.Errorf("the second message: id %q, body %q, mode %d; output %q", got[1].MessageId, got[1].Body, got[1].DeliveryMode, out)
	}

	// Unroutable: the confirm's outcome says so, and the exit is 1.
	code, v, errs = cliJSON(t, "x", "publish", testenv.Name(t, "nobody"))
	if code != 1 || v["outcome"] != "unroutable" || !strings.Contains(errs, "unroutable") {
		t.Errorf("unroutable publish: exit %d, %v, stderr %q", code, v, errs)
	}
	code, _, errs = cliRun(t, "x", "publish", testenv.Name(t, "nobody"), "--allow-unroutable")
	if code != 0 {
		t.Errorf("--allow-unroutable: exit %d, stderr %q", code, errs)
	}
	// A missing exchange; a bad header.
	code, _, errs = cliRun(t, "x", "publish", "--exchange", testenv.Name(t, "no-exchange"), "k")
	if code != 1 || !strings.Contains(errs, "does not exist") {
		t.Errorf("missing exchange: exit %d, stderr %q", code, errs)
	}
	code, _, errs = cliRun(t, "x", "publish", q, "-H", "novalue")
	if code != 2 || !strings.Contains(errs, "NAME=VALUE") {
		t.Errorf("bad header: exit %d, stderr %q", code, errs)
	}
}

// Issue 22 item 10 through the built binary: every spelling of --json
// prints JSON, on success as on failure.
func TestCLIJSONSpellings(t *testing.T) {
	b := testenv.Broker(t, mq.Config{})
	_, dlq, _ := opsSetup(t, b)
	for _, spelling := range []string{"--json", "--json=true", "--json=1"} {
		for _, tc := range []struct {
			queue string
			code  int
		}{{dlq, 0}, {testenv.Name(t, "missing"), 1}} {
			code, out, _ := cliRun(t, "", spelling, "count", tc.queue)
			var v map[string]any
			if err := json.Unmarshal([]byte(out), &v); err != nil || code != tc.code || v["queues"] == nil {
				t.Errorf("%s count %s: exit %d, stdout %q; want %d and one JSON object", spelling, tc.queue, code, out, tc.code)
			}
		}
	}
	if code, out, _ := cliRun(t, "", "--json=false", "count", dlq); code != 0 || !strings.HasPrefix(out, "QUEUE") {
		t.Errorf("--json=false: exit %d, stdout %q; want the table", code, out)
	}
}
