//go:build chaos

package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acemq/acemq-go/internal/testenv"
	"github.com/acemq/acemq-go/middleware"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/retry"
)

// Scenario 3: a resource alarm. The memory watermark is set so low that the
// broker raises its memory alarm and blocks every publishing connection
// (connection.blocked), held for a few seconds, then restored to exactly
// what it was. This is the one fault here that reaches beyond the test's own
// connections — every publisher on the broker blocks while it lasts — so it
// is kept short, and restored by a t.Cleanup too, even if the test fails.
//
// While the alarm lasts:
//   - publishes with a long context block, and resume once it clears: they
//     are confirmed and consumed;
//   - a Publish with a 2 s context returns at its deadline (plus a little
//     slack), never later, with an error that says the broker blocks
//     publishing — whether its publisher has a channel of its own already,
//     shares one with a blocked publish, or has none yet.
//
// Afterwards publishing goes on, and every confirmed message is consumed.
func TestChaosMemoryAlarm(t *testing.T) {
	testenv.NoLeaks(t)
	const (
		deadline = 2 * time.Second
		slack    = 600 * time.Millisecond
		hold     = 3 * time.Second // the alarm, from the moment the client knows of it
		waiters  = 4
		batch    = 200
	)
	ctx := testenv.Context(t, 2*time.Minute)
	restoreArgs := chaosWatermark(t, ctx)

	direct := chaosBroker(t, nil, testenv.Name(t, "direct"), "")
	p := retry.Exponential(3, 50*time.Millisecond)
	q := testenv.Queue(t, direct, p)
	lg := newChaosLog(t)
	b := chaosBroker(t, lg, testenv.Name(t, "alarmed"), "")
	led := newChaosLedger("memory-alarm")
	c := chaosConsume(t, ctx, b, q, led.handler(nil), middleware.Standard(p), mq.WithConcurrency(4))
	shared := b.Publisher("") // the waiters' publisher, and one measured publish behind them
	defer shared.Close()
	own := b.Publisher("") // a publisher with a channel of its own, opened before the alarm
	defer own.Close()
	fresh := b.Publisher("") // a publisher first used during the alarm: no channel yet
	defer fresh.Close()

	for i := range batch {
		pub := shared
		if i%2 == 1 {
			pub = own
		}
		if err := led.publish(testenv.Context(t, 10*time.Second), pub, q, fmt.Sprintf("before-%03d", i)); err != nil {
			t.Fatalf("publish before the alarm: %v", err)
		}
	}
	if !testenv.Poll(20*time.Second, led.allHandled) {
		t.Fatal("the messages published before the alarm were not all handled")
	}

	// The alarm. Restored below once the measurements are in, and by this
	// cleanup whatever happens.
	var restoreOnce sync.Once
	var restoredAt time.Time // when the restoring command was issued
	restore := func() {
		restoreOnce.Do(func() {
			restoredAt = time.Now()
			rctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			if _, err := testenv.Rabbitmqctl(rctx, "", append([]string{"set_vm_memory_high_watermark"}, restoreArgs...)...); err != nil {
				t.Errorf("COULD NOT RESTORE THE BROKER'S MEMORY WATERMARK: run `rabbitmqctl set_vm_memory_high_watermark %s` by hand: %v",
					strings.Join(restoreArgs, " "), err)
				return
			}
			t.Logf("memory watermark restored to %s", strings.Join(restoreArgs, " "))
		})
	}
	t.Cleanup(restore)
	if _, err := testenv.Rabbitmqctl(ctx, "", "set_vm_memory_high_watermark", "0.0000001"); err != nil {
		t.Fatalf("raise the memory alarm: %v", err)
	}
	alarmAt := time.Now()
	t.Logf("memory watermark set to 0.0000001: the broker's memory alarm is on")

	// Publishers that wait it out (long contexts) on the shared publisher.
	// The first makes the connection a publishing one, which the broker then
	// blocks; the others start once the client knows, so they wait for the
	// alarm to clear inside Publish, one of them holding the publisher's
	// turn to send.
	type result struct {
		id      string
		took    time.Duration
		err     error
		endedAt time.Time
	}
	var wg sync.WaitGroup
	waited := make([]result, waiters)
	wait := func(k int) {
		wg.Go(func() {
			id := fmt.Sprintf("during-%d", k)
			start := time.Now()
			err := led.publish(testenv.Context(t, 60*time.Second), shared, q, id)
			waited[k] = result{id, time.Since(start), err, time.Now()}
		})
	}
	wait(0)
	if !testenv.Poll(10*time.Second, func() bool { return testenv.Blocked(b) }) {
		restore()
		t.Fatalf("the client was not told the broker blocks publishing (connection.blocked) within 10 s of the alarm; events: %s", lg.Events())
	}
	knownAfter := time.Since(alarmAt)
	t.Logf("connection.blocked reached the client %v after the alarm was raised", knownAfter.Round(time.Millisecond))
	for k := 1; k < waiters; k++ {
		wait(k)
	}
	time.Sleep(100 * time.Millisecond)

	// The measured publishes, each with a 2 s context, all at once.
	measured := []struct {
		name string
		pub  *mq.Publisher
	}{
		{"own channel", own},
		{"shared with blocked publishes", shared},
		{"no channel yet", fresh},
	}
	got := make([]result, len(measured))
	var mwg sync.WaitGroup
	for i, m := range measured {
		mwg.Go(func() {
			id := fmt.Sprintf("deadline-%d", i)
			start := time.Now()
			mctx, cancel := context.WithTimeout(ctx, deadline)
			defer cancel()
			err := led.publish(mctx, m.pub, q, id)
			got[i] = result{id, time.Since(start), err, time.Now()}
		})
	}
	// Hold the alarm for a while past the deadlines, whatever the measured
	// publishes do: one that hangs shows as one that took until the restore.
	time.Sleep(time.Until(alarmAt.Add(knownAfter + hold)))
	restore()
	if !testenv.Wait(&mwg, 30*time.Second) {
		t.Fatalf("publishes with a %v context still had not returned 30 s after the alarm was cleared", deadline)
	}
	for i, m := range measured {
		r := got[i]
		t.Logf("publish with a %v context, %s: returned after %v: %v", deadline, m.name, r.took.Round(time.Millisecond), r.err)
		switch {
		case r.err == nil:
			t.Errorf("publish, %s: confirmed during the alarm; want the deadline's error", m.name)
		case r.took > deadline+slack:
			when := ""
			if r.endedAt.After(restoredAt) {
				when = " (only once the alarm was being cleared)"
			}
			t.Errorf("publish, %s: returned after %v, past its %v deadline (+%v slack)%s: %v", m.name, r.took.Round(time.Millisecond), deadline, slack, when, r.err)
		case !errors.Is(r.err, context.DeadlineExceeded):
			t.Errorf("publish, %s: %v; want an error matching context.DeadlineExceeded", m.name, r.err)
		case !strings.Contains(r.err.Error(), "blocks publishing"):
			t.Errorf("publish, %s: %q does not say the broker blocks publishing", m.name, r.err)
		}
	}
	if !testenv.Poll(15*time.Second, func() bool { return !testenv.Blocked(b) }) {
		t.Errorf("the client still thinks the broker blocks publishing 15 s after the alarm was cleared")
	}
	if !testenv.Wait(&wg, 30*time.Second) {
		t.Fatalf("publishes blocked by the alarm still had not returned 30 s after it was cleared")
	}
	blockedFor := restoredAt.Sub(alarmAt)
	for _, r := range waited {
		if r.err != nil {
			t.Errorf("publish %s (60 s context) failed: %v; it should have waited for the alarm to clear", r.id, r.err)
			continue
		}
		t.Logf("publish %s (60 s context) confirmed after %v, %v after the restore was issued", r.id, r.took.Round(time.Millisecond), r.endedAt.Sub(restoredAt).Round(time.Millisecond))
	}

	for i := range batch {
		if err := led.publish(testenv.Context(t, 10*time.Second), fresh, q, fmt.Sprintf("after-%03d", i)); err != nil {
			t.Fatalf("publish after the alarm: %v", err)
		}
	}
	if !testenv.Poll(30*time.Second, led.allHandled) {
		t.Errorf("not every confirmed message was handled after the alarm")
	}
	if !testenv.Poll(20*time.Second, func() bool { return testenv.Count(t, direct, q) == 0 }) {
		t.Errorf("%s still holds messages", q)
	}
	testenv.Stop(t, c)
	left := testenv.Count(t, direct, q)
	if n := lg.Count("acemq.connection.blocked"); n < 1 {
		t.Errorf("no acemq.connection.blocked record")
	}
	if n := lg.Count("acemq.connection.unblocked"); n < 1 {
		t.Errorf("no acemq.connection.unblocked record")
	}
	led.report(t, lg, nil, fmt.Sprintf("alarm_held=%v blocked_known_after=%v left=%d",
		blockedFor.Round(time.Millisecond), knownAfter.Round(time.Millisecond), left))
}

// chaosWatermark reads the broker's memory high watermark and returns the
// arguments of set_vm_memory_high_watermark that put it back exactly. It
// refuses to go on (fails the test, changing nothing) when an alarm is on
// already — somebody else's test, most likely — or the setting is one it
// cannot read.
func chaosWatermark(t *testing.T, ctx context.Context) []string {
	t.Helper()
	out, err := testenv.Rabbitmqctl(ctx, "", "status", "--formatter", "json")
	if err != nil {
		t.Fatalf("broker status: %v", err)
	}
	var st struct {
		Alarms  []any                      `json:"alarms"`
		Setting map[string]json.RawMessage `json:"vm_memory_high_watermark_setting"`
	}
	if i := strings.Index(out, "{"); i < 0 {
		t.Fatalf("broker status: no JSON in %q", out)
	} else if err := json.Unmarshal([]byte(out[i:]), &st); err != nil {
		t.Fatalf("broker status: %v in %q", err, out)
	}
	if len(st.Alarms) > 0 {
		t.Fatalf("the broker has an alarm on already (%v): another user's; not touching the watermark", st.Alarms)
	}
	var args []string
	if raw, ok := st.Setting["relative"]; ok && len(st.Setting) == 1 {
		var f float64
		if err := json.Unmarshal(raw, &f); err != nil {
			t.Fatalf("vm_memory_high_watermark_setting %s: %v", raw, err)
		}
		if f < 0.01 {
			t.Fatalf("the memory watermark is %v: somebody else's alarm test is running; not touching it", f)
		}
		args = []string{strconv.FormatFloat(f, 'f', -1, 64)}
	} else if raw, ok := st.Setting["absolute"]; ok && len(st.Setting) == 1 {
		var n json.Number
		var s string
		switch {
		case json.Unmarshal(raw, &n) == nil:
			args = []string{"absolute", n.String()}
		case json.Unmarshal(raw, &s) == nil:
			args = []string{"absolute", s}
		default:
			t.Fatalf("vm_memory_high_watermark_setting %s: not a number", raw)
		}
	} else {
		t.Fatalf("vm_memory_high_watermark_setting %v: not a setting this test knows how to restore", st.Setting)
	}
	t.Logf("memory watermark now: %s (restored to that after the alarm)", strings.Join(args, " "))
	return args
}
