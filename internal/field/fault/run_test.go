package fault

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeScript writes a stand-in for field.sh into a temp dir: it appends
// each call's arguments to calls.log, exits 1 for any command named in the
// file fail (one a line), and fails `cut-ok` as many times as the file
// cutgone says (a rule that vanished), then passes. `quorum-leaders` also
// logs its FIELD_CTL_TIMEOUT, sleeps as many seconds as the file
// leaders.sleep says and prints the file leaders.out.
func fakeScript(t *testing.T) (script, dir string) {
	t.Helper()
	dir = t.TempDir()
	script = filepath.Join(dir, "field.sh")
	body := `#!/bin/sh
d="$(dirname "$0")"
echo "$*" >>"$d/calls.log"
if [ -f "$d/fail" ] && grep -qx "$1" "$d/fail"; then echo "fake: $1 fails" >&2; exit 1; fi
if [ "$1" = cut-ok ] && [ -f "$d/cutgone" ]; then
  n="$(cat "$d/cutgone")"
  if [ "$n" -gt 0 ]; then echo $((n - 1)) >"$d/cutgone"; echo "fake: cut 1 has 0 of its 4 rules in place" >&2; exit 1; fi
fi
if [ "$1" = quorum-leaders ]; then
  echo "env FIELD_CTL_TIMEOUT=$FIELD_CTL_TIMEOUT" >>"$d/calls.log"
  if [ -f "$d/leaders.sleep" ]; then exec sleep "$(cat "$d/leaders.sleep")"; fi
  if [ -f "$d/leaders.out" ]; then cat "$d/leaders.out"; fi
fi
exit 0
`
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	return script, dir
}

func calls(t *testing.T, dir string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "calls.log"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

// index is the position of the first call equal to c at or after from, or -1.
func index(cs []string, c string, from int) int {
	for i := from; i < len(cs); i++ {
		if cs[i] == c {
			return i
		}
	}
	return -1
}

type events struct {
	mu sync.Mutex
	ev []Event
}

func (e *events) log(ev Event) { e.mu.Lock(); e.ev = append(e.ev, ev); e.mu.Unlock() }
func (e *events) phases(k Kind) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var p []string
	for _, ev := range e.ev {
		if ev.Fault.Kind == k {
			p = append(p, ev.Phase)
		}
	}
	return p
}

type fakeProcs struct {
	mu     sync.Mutex
	killed []string
	cuts   int
}

func (p *fakeProcs) Kill(role string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.killed = append(p.killed, role)
	return nil
}

func (p *fakeProcs) CutConnections() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cuts++
	return nil
}

func withCutCheckEvery(t *testing.T, d time.Duration) {
	old := CutCheckEvery
	CutCheckEvery = d
	t.Cleanup(func() { CutCheckEvery = old })
}

// TestRunChecksCutWhileItLasts: while a partition lasts, Run runs cut-ok;
// when the cut is found gone it logs an error, heals and applies the cut
// again, and it keeps checking until the partition ends.
func TestRunChecksCutWhileItLasts(t *testing.T) {
	withCutCheckEvery(t, 50*time.Millisecond)
	script, dir := fakeScript(t)
	if err := os.WriteFile(filepath.Join(dir, "cutgone"), []byte("1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := Fault{At: 0, For: 800 * time.Millisecond, Kind: Partition, Args: []string{"f1", "f2,f3"}}
	var ev events
	err := Run(context.Background(), Schedule{Seed: 1, Duration: time.Second, Faults: []Fault{p}}, script, nil, ev.log)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	cs := calls(t, dir)
	first := index(cs, "partition f1 f2,f3", 0)
	gone := index(cs, "cut-ok", first)
	again := index(cs, "partition f1 f2,f3", first+1)
	if first < 0 || gone < 0 || again < 0 || index(cs, "heal", gone) > again {
		t.Fatalf("want partition, a failing cut-ok, heal, partition again; calls:\n%s", strings.Join(cs, "\n"))
	}
	if index(cs, "cut-ok", again) < 0 {
		t.Fatalf("cut-ok not checked after the cut was applied again; calls:\n%s", strings.Join(cs, "\n"))
	}
	if got := strings.Join(ev.phases(Partition), ","); got != "start,error,end" {
		t.Fatalf("events %s, want start,error,end", got)
	}
	ev.mu.Lock()
	msg := ev.ev[1].Err
	ev.mu.Unlock()
	if !strings.Contains(msg, "cut no longer in place") || !strings.Contains(msg, "0 of its 4 rules") {
		t.Fatalf("error event %q does not say the cut went", msg)
	}
}

// TestRunOrderAndHeal: each fault is applied at its offset and undone at
// its end (kill then start, pg-kill then pg-start, netem then
// netem-clear), process faults go to Procs, cut-ok is not run for faults
// that are not cuts, and everything is healed after the last fault.
func TestRunOrderAndHeal(t *testing.T) {
	withCutCheckEvery(t, 20*time.Millisecond)
	script, dir := fakeScript(t)
	ms := time.Millisecond
	s := Schedule{Seed: 2, Duration: time.Second, Faults: []Fault{
		{At: 0, For: 300 * ms, Kind: KillNode, Args: []string{"f2"}},
		{At: 50 * ms, Kind: KillRelay, Args: []string{"relay"}},
		{At: 60 * ms, Kind: ConnCut},
		{At: 100 * ms, For: 100 * ms, Kind: Netem, Args: []string{"f3", "loss", "5%"}},
		{At: 150 * ms, For: 100 * ms, Kind: PGKill},
		{At: 200 * ms, Kind: KillConsumer, Args: []string{"consumer"}},
	}}
	procs := &fakeProcs{}
	var ev events
	t0 := time.Now()
	if err := Run(context.Background(), s, script, procs, ev.log); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if el := time.Since(t0); el < 300*ms {
		t.Fatalf("Run returned after %s, before the kill's 300ms were up", el)
	}
	cs := calls(t, dir)
	for _, pair := range [][2]string{{"kill f2", "start f2"}, {"netem f3 loss 5%", "netem-clear"}, {"pg-kill", "pg-start"}} {
		i := index(cs, pair[0], 0)
		if i < 0 || index(cs, pair[1], i+1) < 0 {
			t.Fatalf("want %q then %q; calls:\n%s", pair[0], pair[1], strings.Join(cs, "\n"))
		}
	}
	if index(cs, "cut-ok", 0) >= 0 {
		t.Fatalf("cut-ok run with no cut in the schedule; calls:\n%s", strings.Join(cs, "\n"))
	}
	tail := strings.Join(cs[len(cs)-6:], ";")
	if tail != "heal;netem-clear;pg-start;start f1;start f2;start f3" {
		t.Fatalf("the final heal is %q", tail)
	}
	if strings.Join(procs.killed, ",") != "relay,consumer" || procs.cuts != 1 {
		t.Fatalf("procs: killed %v, cuts %d", procs.killed, procs.cuts)
	}
	for _, k := range []Kind{KillNode, KillRelay, ConnCut, Netem, PGKill, KillConsumer} {
		if got := strings.Join(ev.phases(k), ","); got != "start,end" {
			t.Fatalf("%s: events %s, want start,end", k, got)
		}
	}
}

// TestRunReportsFailures: a step the script refuses is an error event and
// part of Run's error; the fault is still undone and the field healed.
func TestRunReportsFailures(t *testing.T) {
	script, dir := fakeScript(t)
	if err := os.WriteFile(filepath.Join(dir, "fail"), []byte("partition-oneway\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	f := Fault{At: 0, For: 100 * time.Millisecond, Kind: PartitionOneway, Args: []string{"f1", "f3"}}
	var ev events
	err := Run(context.Background(), Schedule{Faults: []Fault{f}}, script, nil, ev.log)
	if err == nil || !strings.Contains(err.Error(), "partition-oneway f1 f3") || !strings.Contains(err.Error(), "fake: partition-oneway fails") {
		t.Fatalf("Run: %v, want the refused partition-oneway with the script's message", err)
	}
	if got := strings.Join(ev.phases(PartitionOneway), ","); got != "start,error,end" {
		t.Fatalf("events %s, want start,error,end", got)
	}
	if cs := calls(t, dir); index(cs, "heal", 0) < 0 {
		t.Fatalf("not healed; calls:\n%s", strings.Join(cs, "\n"))
	}
	// A process fault with no Procs is an error too, not a silent skip.
	err = Run(context.Background(), Schedule{Faults: []Fault{{Kind: KillRelay, Args: []string{"relay"}}}}, script, nil, nil)
	if err == nil || !strings.Contains(err.Error(), "no Procs") {
		t.Fatalf("Run without Procs: %v", err)
	}
}

// TestRunCancelHeals: a cancelled Run stops waiting, undoes the fault in
// force, heals and returns the context's error.
func TestRunCancelHeals(t *testing.T) {
	withCutCheckEvery(t, 20*time.Millisecond)
	script, dir := fakeScript(t)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	s := Schedule{Faults: []Fault{
		{At: 0, For: time.Hour, Kind: Partition, Args: []string{"f2", "f1,f3"}},
		{At: time.Hour, For: time.Second, Kind: KillNode, Args: []string{"f1"}},
	}}
	t0 := time.Now()
	err := Run(ctx, s, script, nil, nil)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Run: %v, want the deadline", err)
	}
	if el := time.Since(t0); el > 10*time.Second {
		t.Fatalf("Run took %s after its context ended", el)
	}
	cs := calls(t, dir)
	if index(cs, "kill f1", 0) >= 0 {
		t.Fatalf("a fault after the cancel ran; calls:\n%s", strings.Join(cs, "\n"))
	}
	if i := index(cs, "partition f2 f1,f3", 0); i < 0 || index(cs, "heal", i) < 0 || cs[len(cs)-1] != "start f3" {
		t.Fatalf("want the partition, a heal and the final heal; calls:\n%s", strings.Join(cs, "\n"))
	}
}

// TestMostLeader: the node leading the most quorum queues (rows that do
// not name one of f1-f3 aside); a tie goes to the schedule's node when it
// is among the tied, else to the first by name; no listing, or no leader
// listed, falls back to the schedule's node.
func TestMostLeader(t *testing.T) {
	rows := "field.work f2\nfield.inbox f2\nfield.other f1\n"
	tie := "field.work f3\nfield.inbox f1\n"
	cases := []struct {
		rows     string
		err      error
		fallback string
		node     string
		why      string
	}{
		{rows, nil, "f1", "f2", "f2 leads 2 of 3 quorum queues (field.work,field.inbox)"},
		{tie, nil, "f3", "f3", "f3 leads 1 of 2 quorum queues (field.work); tied (f1,f3), broken by the schedule's f3"},
		{tie, nil, "f2", "f1", "f1 leads 1 of 2 quorum queues (field.inbox); tied with f3, broken by name"},
		{rows, errors.New("timed out"), "f3", "f3", "f3 by the schedule: the leaders were not listed: timed out"},
		{"", nil, "f2", "f2", "f2 by the schedule: no quorum queue's leader was listed"},
		{"field.work f4\nfield.inbox\nfield.x f1 f2\n", nil, "f1", "f1", "f1 by the schedule: no quorum queue's leader was listed"},
	}
	for _, c := range cases {
		node, why := mostLeader(c.rows, c.err, c.fallback)
		if node != c.node || why != c.why {
			t.Errorf("mostLeader(%q, %v, %s) = %s, %q; want %s, %q", c.rows, c.err, c.fallback, node, why, c.node, c.why)
		}
	}
}

func withLeaderTimeout(t *testing.T, d time.Duration) {
	old := leaderTimeout
	leaderTimeout = d
	t.Cleanup(func() { leaderTimeout = old })
}

// TestRunPartitionLeader: a PartitionLeader asks the script for the
// quorum queues' leaders when it fires (rabbitmqctl bounded below
// leaderTimeout), cuts the node that leads the most from the two others
// for its For less the time set aside to find it, keeps that same cut
// when it applies it again, and logs the cut it made, start and end
// alike, the start with why that node.
func TestRunPartitionLeader(t *testing.T) {
	withCutCheckEvery(t, 50*time.Millisecond)
	withLeaderTimeout(t, time.Second)
	script, dir := fakeScript(t)
	if err := os.WriteFile(filepath.Join(dir, "leaders.out"), []byte("field.work f3\nfield.inbox f3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cutgone"), []byte("1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	f := Fault{At: 0, For: 1600 * time.Millisecond, Kind: PartitionLeader, Args: []string{"else", "f1"}}
	var ev events
	if err := Run(context.Background(), Schedule{Faults: []Fault{f}}, script, nil, ev.log); err != nil {
		t.Fatalf("Run: %v", err)
	}
	cs := calls(t, dir)
	asked := index(cs, "quorum-leaders", 0)
	first := index(cs, "partition f3 f1,f2", asked)
	again := index(cs, "partition f3 f1,f2", first+1)
	if asked < 0 || cs[asked+1] != "env FIELD_CTL_TIMEOUT="+leaderCtlTimeout || first < 0 || again < 0 || index(cs, "heal", again) < 0 {
		t.Fatalf("want the leaders asked (FIELD_CTL_TIMEOUT=%s), f3 cut, cut again, healed; calls:\n%s", leaderCtlTimeout, strings.Join(cs, "\n"))
	}
	ev.mu.Lock()
	defer ev.mu.Unlock()
	var phases []string
	for _, e := range ev.ev {
		phases = append(phases, e.Phase)
		if got := strings.Join(e.Fault.Args, " "); e.Fault.Kind != PartitionLeader || got != "f3 f1,f2" {
			t.Fatalf("%s event logs %s %s, want partition-leader f3 f1,f2", e.Phase, e.Fault.Kind, got)
		}
	}
	if strings.Join(phases, ",") != "start,error,end" {
		t.Fatalf("events %v, want start,error,end", phases)
	}
	if n := ev.ev[0].Note; !strings.HasPrefix(n, "f3 leads 2 of 2 quorum queues (field.work,field.inbox) (asked in ") {
		t.Fatalf("start note %q", n)
	}
	if cut := ev.ev[2].T.Sub(ev.ev[0].T); cut < 550*time.Millisecond || cut > 1300*time.Millisecond {
		t.Fatalf("the cut lasted %s, want about 600ms (For 1.6s less 1s set aside to find the node)", cut)
	}
}

// TestRunPartitionLeaderFallback: when the leaders are not listed within
// leaderTimeout, the schedule's node is cut, and the start says so.
func TestRunPartitionLeaderFallback(t *testing.T) {
	withLeaderTimeout(t, 300*time.Millisecond)
	script, dir := fakeScript(t)
	if err := os.WriteFile(filepath.Join(dir, "leaders.sleep"), []byte("30\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	f := Fault{At: 0, For: 400 * time.Millisecond, Kind: PartitionLeader, Args: []string{"else", "f2"}}
	var ev events
	t0 := time.Now()
	if err := Run(context.Background(), Schedule{Faults: []Fault{f}}, script, nil, ev.log); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if el := time.Since(t0); el > 10*time.Second {
		t.Fatalf("Run took %s: the listing was not bounded", el)
	}
	if cs := calls(t, dir); index(cs, "partition f2 f1,f3", 0) < 0 {
		t.Fatalf("the schedule's f2 not cut; calls:\n%s", strings.Join(cs, "\n"))
	}
	ev.mu.Lock()
	defer ev.mu.Unlock()
	if n := ev.ev[0].Note; ev.ev[0].Phase != PhaseStart || !strings.HasPrefix(n, "f2 by the schedule: the leaders were not listed: ") {
		t.Fatalf("start note %q", n)
	}
}
