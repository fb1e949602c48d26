package check

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq-go/internal/field/history"
)

var t0 = time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)

func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

// clean is a small run in which everything held: three plain messages
// (handled, .dlq, .parked), two committed orders of key k1 in order, one
// rolled back, and one heal.
func clean() Input {
	return Input{
		Seed: 7, Duration: 4 * time.Minute, ScheduleVersion: 2, Faults: 1, Partitions: 1,
		Records: []history.Record{
			{T: at(1), Proc: "publisher", Kind: history.KindPublished, ID: "m1", Expect: history.EndHandled},
			{T: at(1), Proc: "publisher", Kind: history.KindPublished, ID: "m2", Expect: history.EndDLQ},
			{T: at(2), Proc: "publisher", Kind: history.KindPublished, ID: "m3", Expect: history.EndParked},
			{T: at(3), Proc: "worker", Kind: history.KindHandled, ID: "m1"},
			{T: at(1), Proc: "writer", Kind: history.KindCommitted, ID: "o1", Key: "k1", Seq: 1},
			{T: at(2), Proc: "writer", Kind: history.KindRolledBack, ID: "o2", Key: "k1", Seq: 2},
			{T: at(3), Proc: "writer", Kind: history.KindCommitted, ID: "o3", Key: "k1", Seq: 3},
			{T: at(12), Proc: "publisher", Kind: history.KindPublished, ID: "m4", Expect: history.EndHandled},
			{T: at(13), Proc: "worker", Kind: history.KindHandled, ID: "m4"},
		},
		Orders:  []Order{{ID: "o1", Key: "k1", Seq: 1}, {ID: "o3", Key: "k1", Seq: 3}},
		Effects: []Effect{{N: 1, OrderID: "o1", Key: "k1", Seq: 1, T: at(4)}, {N: 2, OrderID: "o3", Key: "k1", Seq: 3, T: at(14)}},
		DLQ:     []string{"m2"},
		Parked:  []string{"m3"},
		Heals:   []time.Time{at(10)},
	}
}

func TestCleanHistoryPasses(t *testing.T) {
	r := Check(clean())
	if !r.OK() {
		var b bytes.Buffer
		r.Report(&b, 10)
		t.Fatalf("violations in a clean history:\n%s", b.String())
	}
	want := "FIELD seed=7 duration=4m0s schedule_version=2 rungs=durable faults=1 partitions=1 kills=0 restarts=0 published=4 committed=2 effects=2 lost=0 duplicate_effects=0 reordered=0 stuck=0 heal_p50_s=4.0 heal_p99_s=4.0 broker_waits=0 late_wait_p50_s=0.00 late_wait_p99_s=0.00 fault_waits=0 fault_late_wait_p50_s=0.00 fault_late_wait_p99_s=0.00 reordered_held=0"
	if got := r.Line(); got != want {
		t.Fatalf("line\n got %s\nwant %s", got, want)
	}
}

// expectOne checks that r has exactly one violation, of inv about id, and
// that the report names the seed (with what replays it) and shows id's
// history.
func expectOne(t *testing.T, r Result, inv, id string) {
	t.Helper()
	if r.OK() || len(r.Violations) != 1 || r.Violations[0].Invariant != inv || r.Violations[0].ID != id {
		t.Fatalf("violations %+v, want one %s of %s", r.Violations, inv, id)
	}
	var b bytes.Buffer
	r.Report(&b, 10)
	if !strings.Contains(b.String(), "replay with SEED=7 DURATION=4m0s SCHEDULE_VERSION=2\n") || !strings.Contains(b.String(), inv+" "+id) {
		t.Fatalf("report does not name the seed and the violation:\n%s", b.String())
	}
}

func TestLostConfirmedMessage(t *testing.T) {
	in := clean()
	in.Records = in.Records[:len(in.Records)-1] // m4 never handled
	r := Check(in)
	expectOne(t, r, "lost", "m4")
	if r.Lost != 1 || !strings.Contains(r.Line(), " lost=1 ") {
		t.Fatalf("lost=%d, line %s", r.Lost, r.Line())
	}
}

// A message expected in .dlq that was handled instead is not where its
// script says: lost from its end.
func TestMessageAtTheWrongEnd(t *testing.T) {
	in := clean()
	in.DLQ = nil
	in.Records = append(in.Records, history.Record{T: at(5), Proc: "worker", Kind: history.KindHandled, ID: "m2"})
	expectOne(t, Check(in), "lost", "m2")
}

func TestLostCommittedOrder(t *testing.T) {
	in := clean()
	in.Effects = in.Effects[:1]
	r := Check(in)
	expectOne(t, r, "lost", "o3")
}

func TestForgottenCommit(t *testing.T) {
	in := clean()
	in.Orders = in.Orders[:1]
	in.Effects = in.Effects[:1]
	expectOne(t, Check(in), "lost", "o3")
}

func TestDuplicateEffect(t *testing.T) {
	in := clean()
	in.Effects = append(in.Effects, Effect{N: 3, OrderID: "o1", Key: "k1", Seq: 1, T: at(15)})
	r := Check(in)
	expectOne(t, r, "duplicate_effect", "o1")
	if r.DuplicateEffects != 1 || r.Reordered != 0 {
		t.Fatalf("duplicate_effects=%d reordered=%d; a duplicate is not a reorder", r.DuplicateEffects, r.Reordered)
	}
}

func TestReorder(t *testing.T) {
	in := clean()
	in.Effects[0].N, in.Effects[1].N = 2, 1 // seq 3 took effect before seq 1
	r := Check(in)
	expectOne(t, r, "reordered", "o1")
	if r.Reordered != 1 || len(r.Violations[0].History) < 2 {
		t.Fatalf("reordered=%d, history %+v: want both orders' records", r.Reordered, r.Violations[0].History)
	}
}

// Different keys are free to interleave.
func TestOtherKeysInterleave(t *testing.T) {
	in := clean()
	in.Orders = append(in.Orders, Order{ID: "o9", Key: "k2", Seq: 1})
	in.Effects = append([]Effect{{N: 0, OrderID: "o9", Key: "k2", Seq: 1}}, in.Effects...)
	in.Effects[0].N = 5
	if r := Check(in); !r.OK() {
		t.Fatalf("violations %+v", r.Violations)
	}
}

func TestStuckMessage(t *testing.T) {
	in := clean()
	in.Records = in.Records[:len(in.Records)-1]
	in.Remaining = []Place{{ID: "m4", Where: "field.work.retry.3s"}}
	r := Check(in)
	expectOne(t, r, "stuck", "m4")
	if r.Stuck != 1 || r.Lost != 0 || !strings.Contains(r.Violations[0].What, "field.work.retry.3s") {
		t.Fatalf("stuck=%d lost=%d %q", r.Stuck, r.Lost, r.Violations[0].What)
	}
}

func TestStuckOutboxRow(t *testing.T) {
	in := clean()
	in.Effects = in.Effects[:1]
	in.Remaining = []Place{{ID: "o3", Where: "outbox"}}
	r := Check(in)
	expectOne(t, r, "stuck", "o3")
}

// An unconfirmed publish still queued at the end is stuck too.
func TestStuckUnconfirmed(t *testing.T) {
	in := clean()
	in.Remaining = []Place{{ID: "m9", Where: "field.work"}}
	expectOne(t, Check(in), "stuck", "m9")
}

func TestRolledBackDelivered(t *testing.T) {
	in := clean()
	in.Effects = append(in.Effects, Effect{N: 3, OrderID: "o2", Key: "k1", Seq: 2, T: at(15)})
	r := Check(in)
	// o2 (seq 2) after o3 (seq 3) is also a reorder; the rollback is the point.
	var found bool
	for _, v := range r.Violations {
		if v.Invariant == "rolledback_delivered" && v.ID == "o2" {
			found = true
		}
	}
	if !found || r.DuplicateEffects != 1 {
		t.Fatalf("violations %+v duplicate_effects=%d, want o2's rollback delivered", r.Violations, r.DuplicateEffects)
	}
}

func TestRolledBackCommitted(t *testing.T) {
	in := clean()
	in.Orders = append(in.Orders, Order{ID: "o2", Key: "k1", Seq: 2})
	in.Effects = append(in.Effects[:1], Effect{N: 2, OrderID: "o2", Key: "k1", Seq: 2, T: at(5)}, Effect{N: 3, OrderID: "o3", Key: "k1", Seq: 3, T: at(14)})
	expectOne(t, Check(in), "rolledback_committed", "o2")
}

func TestHealTimes(t *testing.T) {
	in := clean()
	in.Heals = []time.Time{at(0.5), at(10), at(100)}
	r := Check(in)
	// at 0.5: published 1 (0.5 s), committed 1 (0.5), handled 3 (2.5), effect 4 (3.5) -> 3.5
	// at 10: 12, 13, 14 -> 4; at 100: nothing after, left out.
	if len(r.Heals) != 2 || r.Heals[0] != 3500*time.Millisecond || r.Heals[1] != 4*time.Second {
		t.Fatalf("heals %v", r.Heals)
	}
	if r.HealP50 != 3500*time.Millisecond || r.HealP99 != 4*time.Second {
		t.Fatalf("p50 %v p99 %v", r.HealP50, r.HealP99)
	}
}

func TestHistoryRoundTrip(t *testing.T) {
	dir := t.TempDir()
	w, err := history.Create(dir+"/a.jsonl", "writer")
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Add(history.Record{T: at(2), Kind: history.KindCommitted, ID: "o1", Key: "k1", Seq: 1}); err != nil {
		t.Fatal(err)
	}
	w2, _ := history.Create(dir+"/b.jsonl", "worker")
	_ = w2.Add(history.Record{T: at(1), Kind: history.KindHandled, ID: "m1"})
	_ = w.Close()
	_ = w2.Close()
	// a torn last line, as a kill mid-write could leave
	f, _ := os.OpenFile(dir+"/b.jsonl", os.O_WRONLY|os.O_APPEND, 0)
	_, _ = f.Write([]byte(`{"t":"2026-`))
	_ = f.Close()
	recs, err := history.Read(dir)
	if err != nil || len(recs) != 2 || recs[0].ID != "m1" || recs[1].Proc != "writer" || recs[1].Seq != 1 {
		t.Fatalf("read %+v %v", recs, err)
	}
}
