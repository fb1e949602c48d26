//go:build integration

package integration

// The operator calls (package ops) and the acemq command against the real
// broker: replay moves every dead letter back and conserves the count when
// interrupted and run again; peek leaves the queue as it was. Helpers here
// start with ops.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/internal/testenv"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/ops"
	"github.com/acemq/acemq-go/topology"
)

// opsSetup declares q (quorum, with dead letters: q.dlq and q.parked come
// with it) and deletes all three when the test ends.
func opsSetup(t testing.TB, b *mq.Broker) (q, dlq, parked string) {
	t.Helper()
	q = testenv.Name(t)
	dlq, parked = topology.DeadLetterQueue(q), topology.ParkedQueue(q)
	testenv.Cleanup(t, q, dlq, parked)
	if err := b.Declare(testenv.Context(t, 10*time.Second), topology.New().Queue(q, topology.DeadLetter())); err != nil {
		t.Fatalf("declare %s: %v", q, err)
	}
	return q, dlq, parked
}

// opsDeadLetter is a dead letter as the library writes it, failed on
// source after 5 attempts.
func opsDeadLetter(id, source string) mq.Message {
	return mq.Message{
		MessageId: id, Body: []byte(`{"order":"` + id + `"}`), ContentType: "application/json",
		CorrelationId: "corr-" + id, Type: "order.placed", Timestamp: time.Unix(1700000000, 0),
		Headers: amqp.Table{
			mq.HeaderAttempt:     int32(5),
			mq.HeaderSourceQueue: source,
			mq.HeaderReason:      string(mq.ReasonExhausted),
			mq.HeaderError:       "db down",
			mq.HeaderFailedAt:    time.Unix(1700000100, 0),
			"x-tenant":           "acme",
		},
	}
}

func opsDeadLetters(source string, n int) []mq.Message {
	msgs := make([]mq.Message, n)
	for i := range msgs {
		msgs[i] = opsDeadLetter(fmt.Sprintf("m%04d", i), source)
	}
	return msgs
}

// Replay moves every dead letter back to its source queue, counted before
// and after, with body and properties unchanged, the attempt count reset
// and the replay recorded. Dead letters with an unusable source header fall
// back on the .dlq suffix.
func TestOpsReplayMovesEverything(t *testing.T) {
	b := testenv.Broker(t, mq.Config{})
	q, dlq, _ := opsSetup(t, b)
	msgs := opsDeadLetters(q, 150)
	// Malformed dead letters: the suffix rule (or a lenient read) places them.
	msgs[10].Headers[mq.HeaderSourceQueue] = []byte(q)
	msgs[11].Headers[mq.HeaderSourceQueue] = int32(42)
	msgs[12].Headers[mq.HeaderSourceQueue] = dlq
	msgs[13].Headers[mq.HeaderSourceQueue] = ""
	delete(msgs[14].Headers, mq.HeaderSourceQueue)
	msgs[15].Headers[mq.HeaderSourceQueue] = amqp.Table{"queue": q}
	testenv.Publish(t, b, dlq, msgs...)
	if n, m := testenv.Count(t, b, dlq), testenv.Count(t, b, q); n != 150 || m != 0 {
		t.Fatalf("before: %s %d, %s %d", dlq, n, q, m)
	}

	var calls []int
	res, err := ops.Replay(testenv.Context(t, 60*time.Second), b, dlq, ops.ReplayOptions{
		Progress: func(done, total int) {
			if total != 150 {
				t.Errorf("progress total %d", total)
			}
			calls = append(calls, done)
		}})
	if err != nil {
		t.Fatalf("replay: %v", err)
	}
	t.Logf("replay: %+v", res)
	if res.Total != 150 || res.Taken != 150 || res.Moved != 150 || res.Targets[q] != 150 || len(res.Skipped) != 0 || res.Duplicates != 0 {
		t.Fatalf("result %+v", res)
	}
	if len(calls) != 150 || calls[149] != 150 {
		t.Errorf("progress called %d times, last %v", len(calls), calls[len(calls)-1:])
	}
	if n, m := testenv.Count(t, b, dlq), testenv.Count(t, b, q); n != 0 || m != 150 {
		t.Fatalf("after: %s %d, %s %d; want 0, 150", dlq, n, q, m)
	}

	got := testenv.GetAll(t, b, q)
	seen := map[string]bool{}
	for _, d := range got {
		if seen[d.MessageId] {
			t.Errorf("%s twice", d.MessageId)
		}
		seen[d.MessageId] = true
		want := opsDeadLetter(d.MessageId, q)
		if string(d.Body) != string(want.Body) || d.ContentType != want.ContentType || d.CorrelationId != want.CorrelationId ||
			d.Type != want.Type || !d.Timestamp.Equal(want.Timestamp) || d.DeliveryMode != amqp.Persistent {
			t.Errorf("%s: properties changed: %+v", d.MessageId, d)
		}
		if _, ok := d.Headers[mq.HeaderAttempt]; ok || mq.AttemptOf(d.Headers) != 1 {
			t.Errorf("%s: attempt header kept: %v", d.MessageId, d.Headers[mq.HeaderAttempt])
		}
		if from, _ := d.Headers[mq.HeaderReplayedFrom].(string); from != dlq {
			t.Errorf("%s: %s = %v", d.MessageId, mq.HeaderReplayedFrom, d.Headers[mq.HeaderReplayedFrom])
		}
		if at, ok := d.Headers[mq.HeaderReplayedAt].(time.Time); !ok || time.Since(at) > time.Minute {
			t.Errorf("%s: %s = %v", d.MessageId, mq.HeaderReplayedAt, d.Headers[mq.HeaderReplayedAt])
		}
		if d.Headers["x-tenant"] != "acme" {
			t.Errorf("%s: headers lost: %v", d.MessageId, d.Headers)
		}
		// The replay closes the failure record (docs/contract.md, "Replay").
		for _, h := range []string{mq.HeaderSourceQueue, mq.HeaderReason, mq.HeaderError, mq.HeaderFailedAt} {
			if v, ok := d.Headers[h]; ok {
				t.Errorf("%s: %s = %v kept by the replay", d.MessageId, h, v)
			}
		}
	}
	if len(seen) != 150 {
		t.Errorf("%d distinct messages in %s, want 150", len(seen), q)
	}
}

// A replay interrupted mid-run (ctx cancelled after N messages, or at a
// random moment) and run again loses nothing: the count is conserved at
// every step, and duplicates are reported (there should be none).
func TestOpsReplayInterruptedAndRerun(t *testing.T) {
	for _, tc := range []struct {
		name   string
		cancel func(cancel context.CancelFunc) ops.ReplayOptions
	}{
		{"after 100 messages", func(cancel context.CancelFunc) ops.ReplayOptions {
			return ops.ReplayOptions{Progress: func(done, _ int) {
				if done == 100 {
					cancel()
				}
			}}
		}},
		{"at a random moment", func(cancel context.CancelFunc) ops.ReplayOptions {
			time.AfterFunc(30*time.Millisecond, cancel)
			return ops.ReplayOptions{}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const total = 300
			b := testenv.Broker(t, mq.Config{})
			q, dlq, _ := opsSetup(t, b)
			testenv.Publish(t, b, dlq, opsDeadLetters(q, total)...)

			runs, dups := 0, 0
			for testenv.Count(t, b, dlq) > 0 {
				runs++
				if runs > 50 {
					t.Fatal("the replay does not finish")
				}
				ctx, cancel := context.WithCancel(context.Background())
				opts := ops.ReplayOptions{}
				if runs == 1 {
					opts = tc.cancel(cancel)
				}
				res, err := ops.Replay(ctx, b, dlq, opts)
				cancel()
				t.Logf("run %d: moved %d of %d, duplicates %d, err %v", runs, res.Moved, res.Total, res.Duplicates, err)
				if runs == 1 {
					if !errors.Is(err, context.Canceled) {
						t.Logf("the first run was not interrupted (err %v); the test proves less", err)
					}
				} else if err != nil {
					t.Fatalf("run %d: %v", runs, err)
				}
				dups += res.Duplicates
				if n, m := testenv.Count(t, b, dlq), testenv.Count(t, b, q); n+m != total+dups {
					t.Fatalf("after run %d: %s %d + %s %d != %d: lost messages", runs, dlq, n, q, m, total+dups)
				}
			}
			got := testenv.GetAll(t, b, q)
			seen := map[string]int{}
			for _, d := range got {
				seen[d.MessageId]++
			}
			dup := len(got) - len(seen)
			t.Logf("%d runs; %d messages in %s, %d distinct, %d duplicates", runs, len(got), q, len(seen), dup)
			if len(seen) != total {
				t.Fatalf("%d distinct messages replayed, want %d", len(seen), total)
			}
			if dup != 0 {
				t.Errorf("%d duplicates after an interrupt (reported: %d)", dup, dups)
			}
		})
	}
}

// A republish that comes back unroutable (the source queue is gone) stops
// the replay; the message stays in the .dlq and To moves it.
func TestOpsReplayUnroutableStopsAndKeeps(t *testing.T) {
	b := testenv.Broker(t, mq.Config{})
	q, dlq, _ := opsSetup(t, b)
	gone := q + ".gone"
	msgs := opsDeadLetters(q, 4)
	msgs[2].Headers[mq.HeaderSourceQueue] = gone
	testenv.Publish(t, b, dlq, msgs...)

	res, err := ops.Replay(testenv.Context(t, 30*time.Second), b, dlq, ops.ReplayOptions{})
	t.Logf("replay: %+v: %v", res, err)
	if !errors.Is(err, mq.ErrUnroutable) || !strings.Contains(err.Error(), gone) {
		t.Fatalf("replay: %v, want mq.ErrUnroutable naming %s", err, gone)
	}
	if res.Moved != 2 {
		t.Errorf("moved %d before the unroutable one, want 2", res.Moved)
	}
	testenv.WaitCount(t, b, dlq, 2, 10*time.Second)
	if m := testenv.Count(t, b, q); m != 2 {
		t.Fatalf("%s holds %d, want 2", q, m)
	}

	res, err = ops.Replay(testenv.Context(t, 30*time.Second), b, dlq, ops.ReplayOptions{To: q})
	if err != nil || res.Moved != 2 || res.Targets[q] != 2 {
		t.Fatalf("replay with To: %+v, %v", res, err)
	}
	if n, m := testenv.Count(t, b, dlq), testenv.Count(t, b, q); n != 0 || m != 4 {
		t.Fatalf("after: %s %d, %s %d", dlq, n, q, m)
	}
}

// Messages whose destination cannot be worked out are left where they
// were and reported, the others moved.
func TestOpsReplaySkipsWhatItCannotPlace(t *testing.T) {
	b := testenv.Broker(t, mq.Config{})
	q, _, _ := opsSetup(t, b)
	holding := testenv.Name(t, "holding")
	testenv.Cleanup(t, holding)
	if err := b.Declare(testenv.Context(t, 10*time.Second), topology.New().Queue(holding, topology.Classic())); err != nil {
		t.Fatal(err)
	}
	msgs := opsDeadLetters(q, 3)
	delete(msgs[0].Headers, mq.HeaderSourceQueue)
	msgs[2].Headers[mq.HeaderSourceQueue] = holding // itself
	testenv.Publish(t, b, holding, msgs...)

	res, err := ops.Replay(testenv.Context(t, 30*time.Second), b, holding, ops.ReplayOptions{})
	t.Logf("replay: %+v", res)
	if err != nil {
		t.Fatalf("replay: %v", err)
	}
	if res.Moved != 1 || len(res.Skipped) != 2 {
		t.Fatalf("moved %d, skipped %d; want 1, 2", res.Moved, len(res.Skipped))
	}
	for _, s := range res.Skipped {
		if !errors.Is(s.Err, ops.ErrNoSource) {
			t.Errorf("skipped %s: %v", s.MessageId, s.Err)
		}
	}
	testenv.WaitCount(t, b, holding, 2, 10*time.Second)
	if m := testenv.Count(t, b, q); m != 1 {
		t.Fatalf("%s holds %d, want 1", q, m)
	}
}

// A dry run moves nothing and says where everything would go; Limit moves
// that many; missing queues are named.
func TestOpsReplayDryRunLimitAndMissing(t *testing.T) {
	b := testenv.Broker(t, mq.Config{})
	q, _, parked := opsSetup(t, b)
	testenv.Publish(t, b, parked, opsDeadLetters(q, 5)...)

	res, err := ops.Replay(testenv.Context(t, 30*time.Second), b, parked, ops.ReplayOptions{DryRun: true})
	if err != nil || !res.DryRun || res.Moved != 5 || res.Targets[q] != 5 {
		t.Fatalf("dry run: %+v, %v", res, err)
	}
	testenv.WaitCount(t, b, parked, 5, 10*time.Second)
	if m := testenv.Count(t, b, q); m != 0 {
		t.Fatalf("the dry run moved %d", m)
	}

	res, err = ops.Replay(testenv.Context(t, 30*time.Second), b, parked, ops.ReplayOptions{Limit: 3})
	if err != nil || res.Total != 3 || res.Moved != 3 {
		t.Fatalf("limit 3: %+v, %v", res, err)
	}
	if n, m := testenv.Count(t, b, parked), testenv.Count(t, b, q); n != 2 || m != 3 {
		t.Fatalf("after limit 3: %s %d, %s %d", parked, n, q, m)
	}

	if _, err := ops.Replay(testenv.Context(t, 10*time.Second), b, q+".nope.dlq", ops.ReplayOptions{}); !errors.Is(err, mq.ErrNotFound) {
		t.Errorf("from a missing queue: %v, want mq.ErrNotFound", err)
	}
	if _, err := ops.Replay(testenv.Context(t, 10*time.Second), b, parked, ops.ReplayOptions{To: q + ".nope"}); !errors.Is(err, mq.ErrNotFound) {
		t.Errorf("to a missing queue: %v, want mq.ErrNotFound", err)
	}
	if n := testenv.Count(t, b, parked); n != 2 {
		t.Errorf("%s holds %d after the failed calls, want 2", parked, n)
	}
}

// Peek shows the head of the queue with the contract's headers read, and
// leaves the queue as it was: same count, same order.
func TestOpsPeekLeavesTheQueueUnchanged(t *testing.T) {
	b := testenv.Broker(t, mq.Config{})
	q, dlq, _ := opsSetup(t, b)
	testenv.Publish(t, b, dlq, opsDeadLetters(q, 5)...)

	got, err := ops.Peek(testenv.Context(t, 10*time.Second), b, dlq, 3)
	if err != nil || len(got) != 3 {
		t.Fatalf("peek: %d, %v", len(got), err)
	}
	for i, p := range got {
		if p.MessageId != fmt.Sprintf("m%04d", i) || p.Position != i+1 || p.Attempt != 5 || p.Reason != "exhausted" ||
			p.Error != "db down" || p.SourceQueue != q || !p.FailedAt.Equal(time.Unix(1700000100, 0)) ||
			p.Preview != fmt.Sprintf(`{"order":"m%04d"}`, i) || p.Headers["x-tenant"] != "acme" {
			t.Errorf("peeked %d: %+v", i, p)
		}
	}
	testenv.WaitCount(t, b, dlq, 5, 10*time.Second)
	all, err := ops.Peek(testenv.Context(t, 10*time.Second), b, dlq, 50)
	if err != nil || len(all) != 5 {
		t.Fatalf("peek 50: %d, %v", len(all), err)
	}
	testenv.WaitCount(t, b, dlq, 5, 10*time.Second)
	var order []string
	for _, d := range testenv.GetAll(t, b, dlq) {
		order = append(order, d.MessageId)
	}
	if got := strings.Join(order, ","); got != "m0000,m0001,m0002,m0003,m0004" {
		t.Errorf("order after peeking: %s", got)
	}
	if _, err := ops.Peek(testenv.Context(t, 10*time.Second), b, q+".nope", 1); !errors.Is(err, mq.ErrNotFound) {
		t.Errorf("peek at a missing queue: %v, want mq.ErrNotFound", err)
	}
}

func TestOpsCount(t *testing.T) {
	b := testenv.Broker(t, mq.Config{})
	q, dlq, _ := opsSetup(t, b)
	testenv.Publish(t, b, dlq, opsDeadLetters(q, 7)...)
	got, err := ops.Count(testenv.Context(t, 10*time.Second), b, dlq, q, q+".nope")
	if err != nil {
		t.Fatal(err)
	}
	want := []ops.QueueCount{{Queue: dlq, Exists: true, Ready: 7}, {Queue: q, Exists: true}, {Queue: q + ".nope"}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("count: %+v, want %+v", got, want)
	}
}

// opsRun runs acemq with args against the test broker.
func opsRun(t testing.TB, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(acemqCLI(t), args...)
	cmd.Env = append(os.Environ(), "AMQP_URL="+testenv.URL())
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		t.Fatalf("run acemq: %v", err)
	}
	if strings.Contains(out.String()+errb.String(), "guest:guest") {
		t.Errorf("acemq %v printed credentials:\n%s%s", args, out.String(), errb.String())
	}
	return code, out.String(), errb.String()
}

// The acemq command end to end: count, peek, a dry run, a limited replay
// and the rest, counted before and after each.
func TestOpsCLI(t *testing.T) {
	b := testenv.Broker(t, mq.Config{})
	q, dlq, _ := opsSetup(t, b)
	testenv.Publish(t, b, dlq, opsDeadLetters(q, 150)...)

	code, out, errs := opsRun(t, "count", q, dlq)
	if code != 0 || !strings.Contains(out, dlq+"  150") {
		t.Fatalf("count: exit %d\n%s%s", code, out, errs)
	}
	code, out, errs = opsRun(t, "peek", dlq, "-n", "2")
	if code != 0 || !strings.Contains(out, "#2  message-id=m0001") || !strings.Contains(out, "reason:") ||
		!strings.Contains(out, "source queue:    "+q) || !strings.Contains(out, "all left in place") {
		t.Fatalf("peek: exit %d\n%s%s", code, out, errs)
	}
	testenv.WaitCount(t, b, dlq, 150, 10*time.Second)

	code, out, errs = opsRun(t, "replay", dlq, "--dry-run")
	if code != 0 || !strings.Contains(out, fmt.Sprintf("dry run: would move 150 of 150 message(s) from %s: 150 to %s", dlq, q)) {
		t.Fatalf("dry run: exit %d\n%s%s", code, out, errs)
	}
	testenv.WaitCount(t, b, dlq, 150, 10*time.Second)

	code, out, errs = opsRun(t, "replay", dlq, "--limit", "50")
	if code != 0 || !strings.Contains(out, "moved 50 of 50") {
		t.Fatalf("replay --limit 50: exit %d\n%s%s", code, out, errs)
	}
	if n, m := testenv.Count(t, b, dlq), testenv.Count(t, b, q); n != 100 || m != 50 {
		t.Fatalf("after --limit 50: %s %d, %s %d", dlq, n, q, m)
	}
	code, out, errs = opsRun(t, "replay", dlq)
	if code != 0 || !strings.Contains(out, fmt.Sprintf("moved 100 of 100 message(s) from %s: 100 to %s", dlq, q)) {
		t.Fatalf("replay: exit %d\n%s%s", code, out, errs)
	}
	if n, m := testenv.Count(t, b, dlq), testenv.Count(t, b, q); n != 0 || m != 150 {
		t.Fatalf("after replay: %s %d, %s %d", dlq, n, q, m)
	}

	if code, out, errs := opsRun(t, "replay", q+".nope.dlq"); code != 1 {
		t.Errorf("replay of a missing queue: exit %d\n%s%s", code, out, errs)
	}
	if code, out, errs := opsRun(t, "count", q+".nope"); code != 1 {
		t.Errorf("count of a missing queue: exit %d\n%s%s", code, out, errs)
	}
}

// Ctrl-C during `acemq replay` stops it between two messages (exit 130),
// and running it again finishes the job: nothing lost, nothing twice.
func TestOpsCLIInterrupted(t *testing.T) {
	const total = 2000
	b := testenv.Broker(t, mq.Config{})
	q, dlq, _ := opsSetup(t, b)
	testenv.Publish(t, b, dlq, opsDeadLetters(q, total)...)

	cmd := exec.Command(acemqCLI(t), "replay", dlq)
	cmd.Env = append(os.Environ(), "AMQP_URL="+testenv.URL())
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Interrupt once the replay is under way.
	testenv.Eventually(t, 20*time.Second, func() bool { return testenv.Count(t, b, q) > 0 }, "the replay did not start")
	_ = cmd.Process.Signal(syscall.SIGINT)
	err := cmd.Wait()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	}
	t.Logf("interrupted: exit %d\n%s%s", code, out.String(), errb.String())
	if code != 130 && code != 0 {
		t.Fatalf("exit %d after SIGINT, want 130 (or 0 if it had finished)", code)
	}
	n, m := testenv.Count(t, b, dlq), testenv.Count(t, b, q)
	t.Logf("after the interrupt: %s %d, %s %d", dlq, n, q, m)
	if n+m != total {
		t.Fatalf("%d + %d != %d after the interrupt", n, m, total)
	}
	if code, o, e := opsRun(t, "replay", dlq); code != 0 {
		t.Fatalf("second run: exit %d\n%s%s", code, o, e)
	}
	seen := map[string]int{}
	got := testenv.GetAll(t, b, q)
	for _, d := range got {
		seen[d.MessageId]++
	}
	if len(got) != total || len(seen) != total {
		t.Fatalf("%d messages, %d distinct in %s; want %d", len(got), len(seen), q, total)
	}
}
