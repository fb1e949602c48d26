//go:build integration

package integration

// The acemq command, each command's output, exit status and --json shape,
// including the failures: a missing queue, a refused confirmation, a
// filter that matches nothing, a quorum queue peeked.

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/internal/testenv"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/topology"
)

// cliRun runs acemq with stdin and args against the test broker.
func cliRun(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(acemqCLI(t), args...)
	cmd.Env = append(os.Environ(), "AMQP_URL="+testenv.URL())
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run acemq: %v", err)
	}
	if strings.Contains(out.String()+errb.String(), "guest:guest") {
		t.Errorf("acemq %v printed credentials", args)
	}
	return code, out.String(), errb.String()
}

// cliJSON runs acemq --json and decodes its stdout.
func cliJSON(t *testing.T, stdin string, args ...string) (int, map[string]any, string) {
	t.Helper()
	code, out, errs := cliRun(t, stdin, append([]string{"--json"}, args...)...)
	var v map[string]any
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("acemq --json %v: stdout is not one JSON object (%v):\n%s", args, err, out)
	}
	return code, v, errs
}

// plainError checks stderr is one line "acemq: ..." containing want.
func plainError(t *testing.T, what, stderr, want string) {
	t.Helper()
	if !strings.HasPrefix(stderr, "acemq: ") || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, want) {
		t.Errorf("%s: stderr %q, want one line acemq: … %s", what, stderr, want)
	}
}

func TestCLICount(t *testing.T) {
	b := testenv.Broker(t, mq.Config{})
	q, dlq, _ := opsSetup(t, b)
	testenv.Publish(t, b, dlq, opsDeadLetters(q, 3)...)

	code, out, errs := cliRun(t, "", "count", q, dlq)
	if code != 0 || !strings.Contains(out, dlq+"  3") || errs != "" {
		t.Fatalf("count: exit %d\n%s\nstderr %q", code, out, errs)
	}
	code, v, _ := cliJSON(t, "", "count", dlq)
	qs, _ := v["queues"].([]any)
	if code != 0 || len(qs) != 1 {
		t.Fatalf("count --json: exit %d, %v", code, v)
	}
	row := qs[0].(map[string]any)
	if row["queue"] != dlq || row["exists"] != true || row["ready"] != float64(3) || row["consumers"] != float64(0) {
		t.Fatalf("count --json row %v", row)
	}
	// A missing queue: exit 1, one plain line, and in --json the row and the error.
	missing := q + ".nope"
	code, _, errs = cliRun(t, "", "count", missing)
	if code != 1 {
		t.Fatalf("count of a missing queue: exit %d", code)
	}
	plainError(t, "count of a missing queue", errs, `queue "`+missing+`" does not exist`)
	code, v, _ = cliJSON(t, "", "count", missing)
	qs, _ = v["queues"].([]any)
	if code != 1 || v["exit"] != float64(1) || !strings.Contains(v["error"].(string), missing) || len(qs) != 1 || qs[0].(map[string]any)["exists"] != false {
		t.Fatalf("count --json of a missing queue: exit %d, %v", code, v)
	}
}

func TestCLIPeek(t *testing.T) {
	b := testenv.Broker(t, mq.Config{})
	q, dlq, _ := opsSetup(t, b)
	msgs := opsDeadLetters(q, 4)
	msgs[1].Headers[mq.HeaderOriginalRoutingKey] = "order.placed"
	msgs[3].Headers[mq.HeaderReason] = string(mq.ReasonRejected)
	testenv.Publish(t, b, dlq, msgs...)

	code, out, errs := cliRun(t, "", "peek", dlq, "--limit", "2")
	if code != 0 || errs != "" || !strings.Contains(out, "#2  message-id=m0001") || strings.Contains(out, "#3") ||
		!strings.Contains(out, "attempts used:   4\n") || !strings.Contains(out, "routing key:     order.placed\n") ||
		!strings.Contains(out, "routing key:     "+dlq+"\n") || !strings.Contains(out, "source queue:    "+q) {
		t.Fatalf("peek: exit %d\n%s\nstderr %q", code, out, errs)
	}
	code, v, _ := cliJSON(t, "", "peek", dlq, "-n", "2")
	ms, _ := v["messages"].([]any)
	if code != 0 || v["queue"] != dlq || len(ms) != 2 {
		t.Fatalf("peek --json: exit %d, %v", code, v)
	}
	m := ms[1].(map[string]any)
	if m["message_id"] != "m0001" || m["attempts_used"] != float64(4) || m["original_routing_key"] != "order.placed" ||
		m["reason"] != "exhausted" || m["error"] != "db down" || m["source_queue"] != q || m["body"] != `{"order":"m0001"}` ||
		m["position"] != float64(2) || m["failed_at"] == nil {
		t.Fatalf("peek --json message %v", m)
	}
	// Filters.
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"--reason", "rejected"}, []string{"m0003"}},
		{[]string{"--message-id", "m0002"}, []string{"m0002"}},
		{[]string{"--error", "db", "-n", "2"}, []string{"m0000", "m0001"}},
		{[]string{"--older-than", "1h", "--reason", "exhausted"}, []string{"m0000", "m0001", "m0002"}},
		{[]string{"--older-than", "1000000h"}, nil},
	} {
		code, v, _ := cliJSON(t, "", append([]string{"peek", dlq}, c.args...)...)
		var ids []string
		for _, m := range v["messages"].([]any) {
			ids = append(ids, m.(map[string]any)["message_id"].(string))
		}
		if code != 0 || strings.Join(ids, ",") != strings.Join(c.want, ",") {
			t.Errorf("peek %v: exit %d, ids %v, want %v", c.args, code, ids, c.want)
		}
	}
	code, out, _ = cliRun(t, "", "peek", dlq, "--reason", "parked")
	if code != 0 || !strings.Contains(out, "no message in "+dlq+" matches") {
		t.Errorf("peek matching nothing: exit %d\n%s", code, out)
	}
	testenv.WaitCount(t, b, dlq, 4, 10*time.Second) // all left in place
	// Failures.
	code, _, errs = cliRun(t, "", "peek", q+".nope")
	if code != 1 {
		t.Errorf("peek of a missing queue: exit %d", code)
	}
	plainError(t, "peek of a missing queue", errs, `queue "`+q+`.nope" does not exist`)
	code, v, _ = cliJSON(t, "", "peek", q+".nope")
	if code != 1 || v["exit"] != float64(1) || !strings.Contains(v["error"].(string), "does not exist") {
		t.Errorf("peek --json of a missing queue: exit %d, %v", code, v)
	}
	if code, _, errs := cliRun(t, "", "peek", dlq, "-n", "0"); code != 2 {
		t.Errorf("peek -n 0: exit %d, stderr %q", code, errs)
	}
}

// Peeking a quorum queue raises delivery counts: the CLI says so.
func TestCLIPeekQuorumWarns(t *testing.T) {
	b := testenv.Broker(t, mq.Config{})
	q := testenv.Queue(t, b, servicePolicy, topology.Quorum())
	testenv.Publish(t, b, q, mq.Message{MessageId: "m1", Body: []byte("x")})
	_, _, _ = cliRun(t, "", "peek", q) // returns it with a delivery count of 1
	code, out, errs := cliRun(t, "", "peek", q)
	if code != 0 || !strings.Contains(out, "message-id=m1") {
		t.Fatalf("peek: exit %d\n%s%s", code, out, errs)
	}
	if !strings.HasPrefix(errs, "acemq: warning: "+q+" is a quorum queue") || !strings.Contains(errs, "delivery count") {
		t.Errorf("stderr %q, want a warning that peeking raises delivery counts", errs)
	}
	code, v, _ := cliJSON(t, "", "peek", q)
	ws, _ := v["warnings"].([]any)
	if code != 0 || len(ws) != 1 {
		t.Errorf("peek --json of a quorum queue: %v", v)
	}
}

// peek reads a message as the console does: a message the broker dead-
// lettered (no x-acemq-attempt, its route only in x-death) shows attempts
// used as unknown and the route x-death records; a message carrying
// RabbitMQ 4.x's x-acquired-count (and no x-delivery-count) came from a
// quorum queue, so peek warns. The .dlq here is classic: the headers are
// the publisher's, standing for what the broker writes.
func TestCLIPeekReadsTheBrokersRecords(t *testing.T) {
	b := testenv.Broker(t, mq.Config{})
	_, dlq, _ := opsSetup(t, b)
	death := amqp.Table{"x-death": []any{amqp.Table{
		"queue": "orders", "reason": "delivery_limit", "count": int64(1), "exchange": "shop", "routing-keys": []any{"order.paid"},
	}}}
	testenv.Publish(t, b, dlq, mq.Message{MessageId: "dead", Body: []byte("x"), Headers: death})

	code, out, errs := cliRun(t, "", "peek", dlq)
	if code != 0 || errs != "" || !strings.Contains(out, "attempts used:   unknown (no x-acemq-attempt)\n") ||
		!strings.Contains(out, "routing key:     order.paid\n") {
		t.Fatalf("peek of a broker dead letter: exit %d\n%s\nstderr %q", code, out, errs)
	}
	code, v, _ := cliJSON(t, "", "peek", dlq)
	ms, _ := v["messages"].([]any)
	if code != 0 || len(ms) != 1 {
		t.Fatalf("peek --json: exit %d, %v", code, v)
	}
	if m := ms[0].(map[string]any); m["attempts_used"] != nil || m["original_routing_key"] != "order.paid" || m["original_exchange"] != "shop" {
		t.Fatalf("peek --json of a broker dead letter: %v", m)
	}
	// x-death itself, nested JSON (issue 39), not Go's formatting of it.
	headers, _ := ms[0].(map[string]any)["headers"].(map[string]any)
	deaths, _ := headers["x-death"].([]any)
	if len(deaths) != 1 {
		t.Fatalf("peek --json x-death %#v, want an array of one record", headers["x-death"])
	}
	if d, _ := deaths[0].(map[string]any); d["reason"] != "delivery_limit" || d["count"] != float64(1) {
		t.Fatalf("peek --json x-death[0] %#v, want an object of its fields", deaths[0])
	}

	_, dlq2, _ := opsSetup(t, b)
	testenv.Publish(t, b, dlq2, mq.Message{MessageId: "acq", Body: []byte("x"), Headers: amqp.Table{"x-acquired-count": int64(1)}})
	code, _, errs = cliRun(t, "", "peek", dlq2)
	if code != 0 || !strings.HasPrefix(errs, "acemq: warning: "+dlq2+" is a quorum queue") {
		t.Fatalf("peek of a message marked x-acquired-count: exit %d, stderr %q", code, errs)
	}
}

func TestCLIReplay(t *testing.T) {
	b := testenv.Broker(t, mq.Config{})
	q, dlq, _ := opsSetup(t, b)
	msgs := opsDeadLetters(q, 5)
	msgs[4].Headers[mq.HeaderReason] = string(mq.ReasonRejected)
	testenv.Publish(t, b, dlq, msgs...)

	// A filtered replay moves only what matches.
	code, v, _ := cliJSON(t, "", "replay", dlq, "--message-id", "m0002")
	if code != 0 || v["moved"] != float64(1) || v["unmatched"] != float64(4) || v["from"] != dlq || v["dry_run"] != false ||
		v["targets"].(map[string]any)[q] != float64(1) {
		t.Fatalf("replay --message-id --json: exit %d, %v", code, v)
	}
	if got := testenv.GetAll(t, b, q); len(got) != 1 || got[0].MessageId != "m0002" {
		t.Fatalf("%s holds %d messages after the filtered replay", q, len(got))
	}
	code, out, _ := cliRun(t, "", "replay", dlq, "--reason", "rejected", "--dry-run")
	if code != 0 || !strings.Contains(out, "dry run: would move 1 of 4 message(s) from "+dlq+": 1 to "+q) || !strings.Contains(out, "3 message(s) did not match") {
		t.Fatalf("replay --reason --dry-run: exit %d\n%s", code, out)
	}
	code, out, _ = cliRun(t, "", "replay", dlq, "-n", "2")
	if code != 0 || !strings.Contains(out, "moved 2 of 2") {
		t.Fatalf("replay -n 2: exit %d\n%s", code, out)
	}
	testenv.WaitCount(t, b, dlq, 2, 10*time.Second)
	// A dry run on a missing queue prints no result before the error.
	code, out, errs := cliRun(t, "", "replay", q+".nope.dlq", "--dry-run")
	if code != 1 || out != "" {
		t.Errorf("dry run of a missing queue: exit %d, stdout %q", code, out)
	}
	plainError(t, "dry run of a missing queue", errs, `queue "`+q+`.nope.dlq" does not exist`)
	code, v, _ = cliJSON(t, "", "replay", dlq, "--to", q+".nope")
	if code != 1 || !strings.Contains(v["error"].(string), `queue "`+q+`.nope" does not exist`) || v["moved"] != float64(0) {
		t.Errorf("replay --to a missing queue --json: exit %d, %v", code, v)
	}
	// Left behind: exit 4.
	other := testenv.Name(t, "other")
	testenv.Cleanup(t, other)
	if err := b.Declare(testenv.Context(t, 10*time.Second), topology.New().Queue(other, topology.Classic())); err != nil {
		t.Fatal(err)
	}
	testenv.Publish(t, b, other, mq.Message{MessageId: "stray"})
	code, v, _ = cliJSON(t, "", "replay", other)
	sk, _ := v["skipped"].([]any)
	if code != 4 || v["exit"] != float64(4) || len(sk) != 1 || sk[0].(map[string]any)["message_id"] != "stray" {
		t.Errorf("replay leaving a message behind: exit %d, %v", code, v)
	}
}

func TestCLIPurge(t *testing.T) {
	b := testenv.Broker(t, mq.Config{})
	q, dlq, _ := opsSetup(t, b)
	testenv.Publish(t, b, dlq, opsDeadLetters(q, 3)...)

	// No answer (stdin closed) and "n" change nothing: exit 5.
	for _, answer := range []string{"", "n\n"} {
		code, _, errs := cliRun(t, answer, "purge", dlq)
		if code != 5 || !strings.Contains(errs, "Delete all 3 ready message(s) in "+dlq+" for good? [y/N]") || !strings.Contains(errs, "acemq: not confirmed; nothing was changed") {
			t.Errorf("purge answered %q: exit %d, stderr %q", answer, code, errs)
		}
	}
	testenv.WaitCount(t, b, dlq, 3, 10*time.Second)
	code, out, _ := cliRun(t, "y\n", "purge", dlq)
	if code != 0 || out != "purged 3 message(s) from "+dlq+"\n" {
		t.Fatalf("purge confirmed: exit %d, %q", code, out)
	}
	testenv.Publish(t, b, dlq, opsDeadLetters(q, 2)...)
	code, v, _ := cliJSON(t, "", "purge", dlq, "--yes")
	if code != 0 || v["purged"] != float64(2) || v["queue"] != dlq {
		t.Fatalf("purge --yes --json: exit %d, %v", code, v)
	}
	if n := testenv.Count(t, b, dlq); n != 0 {
		t.Fatalf("%d left after purge", n)
	}
	code, _, errs := cliRun(t, "", "purge", q+".nope", "--yes")
	if code != 1 {
		t.Errorf("purge of a missing queue: exit %d", code)
	}
	plainError(t, "purge of a missing queue", errs, "does not exist")
}

func TestCLIDelete(t *testing.T) {
	b := testenv.Broker(t, mq.Config{})
	q, dlq, _ := opsSetup(t, b)
	testenv.Publish(t, b, dlq, opsDeadLetters(q, 4)...)

	code, _, errs := cliRun(t, "", "delete", dlq, "m0001")
	if code != 5 || !strings.Contains(errs, "Delete message m0001 from "+dlq+" for good?") {
		t.Fatalf("delete unconfirmed: exit %d, %q", code, errs)
	}
	code, v, _ := cliJSON(t, "", "delete", dlq, "m0001", "--yes")
	if code != 0 || v["deleted"] != float64(1) || v["message_id"] != "m0001" || v["queue"] != dlq {
		t.Fatalf("delete --yes --json: exit %d, %v", code, v)
	}
	// The others stay, in their order.
	var ids []string
	for _, d := range testenv.GetAll(t, b, dlq) {
		ids = append(ids, d.MessageId)
	}
	if strings.Join(ids, ",") != "m0000,m0002,m0003" {
		t.Fatalf("%s holds %v after the delete", dlq, ids)
	}
	code, _, errs = cliRun(t, "", "delete", dlq, "m9999", "-y")
	if code != 1 {
		t.Errorf("delete of an unknown id: exit %d", code)
	}
	plainError(t, "delete of an unknown id", errs, `has id "m9999"`)
	code, v, _ = cliJSON(t, "", "delete", q+".nope", "m1", "--yes")
	if code != 1 || !strings.Contains(v["error"].(string), "does not exist") || v["deleted"] != float64(0) {
		t.Errorf("delete --json from a missing queue: exit %d, %v", code, v)
	}
}

// Connection logs only with -v; a wrong port fails at once with exit 3.
func TestCLIQuietConnection(t *testing.T) {
	b := testenv.Broker(t, mq.Config{})
	q, _, _ := opsSetup(t, b)
	_, _, errs := cliRun(t, "", "count", q)
	if errs != "" {
		t.Errorf("count printed to stderr without -v: %q", errs)
	}
	_, _, errs = cliRun(t, "", "-v", "count", q)
	if !strings.Contains(errs, "acemq.connection.open") {
		t.Errorf("-v does not show the connection: %q", errs)
	}
	began := time.Now()
	code, _, errs := cliRun(t, "", "--url", "amqp://guest:guest@127.0.0.1:1/", "count", q)
	if code != 3 || time.Since(began) > 2*time.Second {
		t.Errorf("wrong port: exit %d after %v", code, time.Since(began))
	}
	plainError(t, "wrong port", errs, "connection refused")
	code, v, _ := cliJSON(t, "", "--url", "amqp://guest:guest@127.0.0.1:1/", "count", q)
	if code != 3 || v["exit"] != float64(3) {
		t.Errorf("wrong port --json: exit %d, %v", code, v)
	}
}
