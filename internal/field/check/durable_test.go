package check

import (
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq-go/internal/field/history"
)

// durableRun is rungRun in the durable mode, the wait in the durable rung
// field.work.retry.3s.quorum (a quorum queue that dead-letters at least
// once, led by f1) instead of the classic one: the same cut of f1 at the
// expiry, and m5 nowhere at the end.
func durableRun() Input {
	in := rungRun()
	in.Rungs = RungsDurable
	const rung = "field.work.retry.3s.quorum"
	in.Records[len(in.Records)-1].Queue = rung
	in.RungTTL = map[string]time.Duration{rung: 3 * time.Second}
	in.RungNodes = []RungPlace{{Queue: rung, Node: "f1", At: at(0)}}
	return in
}

// With durable rungs there is no carve-out: the same evidence that makes
// a classic rung's loss rung_lost makes a durable rung's loss lost, a
// violation like any other, and the FIELD line has no rung_lost= at all.
func TestDurableRungLossIsLost(t *testing.T) {
	r := Check(durableRun())
	if r.RungLost != 0 || len(r.RungLosses) != 0 || r.Lost != 1 || r.OK() {
		t.Fatalf("lost=%d rung_lost=%d ok=%v; want lost=1 rung_lost=0: a durable rung's loss is a loss", r.Lost, r.RungLost, r.OK())
	}
	expectOne(t, r, "lost", "m5")
	if l := r.Line(); !strings.Contains(l, " rungs=durable ") || !strings.Contains(l, " lost=1 duplicate_effects=0 ") || strings.Contains(l, "rung_lost") {
		t.Fatalf("durable line %s: want rungs=durable, lost=1 and no rung_lost=", l)
	}
	// The same message in the classic rung stays rung_lost (the carve-out
	// the classic mode keeps for comparison), and the line says so.
	r = Check(rungRun())
	if r.RungLost != 1 || r.Lost != 0 {
		t.Fatalf("classic: lost=%d rung_lost=%d; want lost=0 rung_lost=1", r.Lost, r.RungLost)
	}
	if l := r.Line(); !strings.Contains(l, " rungs=classic ") || !strings.Contains(l, " lost=0 rung_lost=1 ") {
		t.Fatalf("classic line %s", l)
	}
	// A classic rung's name in the durable mode is no excuse either.
	in := rungRun()
	in.Rungs = RungsDurable
	if r := Check(in); r.RungLost != 0 || r.Lost != 1 {
		t.Fatalf("classic rung, durable mode: lost=%d rung_lost=%d; want lost=1", r.Lost, r.RungLost)
	}
}

// Late waits: each hop's first attempt after it, minus the hop and the
// rung's wait (read from the rung's name); a hop never seen home is left
// out; an early one (the confirm came late) counts 0; the waits that
// overlapped a node fault are measured apart.
func TestLateWaits(t *testing.T) {
	in := clean()
	const rung = "field.work.retry.3s.quorum"
	hop := func(id string, t0, home float64, handled bool) {
		in.Records = append(in.Records,
			history.Record{T: at(t0 - 5), Proc: "publisher", Kind: history.KindPublished, ID: id, Expect: history.EndHandled},
			history.Record{T: at(t0), Proc: "worker", Kind: history.KindRungHop, ID: id, Queue: rung})
		if home > 0 {
			k := history.KindAttempt
			if handled {
				k = history.KindHandled
			}
			in.Records = append(in.Records, history.Record{T: at(home), Proc: "worker", Kind: k, ID: id, Attempt: 3})
		}
	}
	hop("a", 20, 23.5, true)        // 0.5 s late
	hop("b", 30, 33.1, false)       // 0.1 s late (an attempt: it came home)
	hop("c", 40, 42.0, true)        // 1 s early: 0
	hop("d", 60, 63.2, true)        // 0.2 s late
	hop("e", 100, 0, false)         // never came home: left out (lost)
	hop("f", 110, 148.0, true)      // 35 s late: waited out a cut
	in.Records = append(in.Records, // a later attempt of a does not count
		history.Record{T: at(30), Proc: "worker", Kind: history.KindHandled, ID: "a", Attempt: 3})
	in.FaultLog = []FaultSpan{
		{Kind: "partition", Args: []string{"f2", "f1,f3"}, Start: at(112), End: at(140)},
		{Kind: "netem", Args: []string{"f1", "loss", "5%"}, Start: at(55), End: at(70)}, // not a node fault
		{Kind: "kill", Args: []string{"f3"}, Start: at(33), End: at(50)},                // b came home at 33.1
	}
	in.Heals = append(in.Heals, at(140), at(50))
	r := Check(in)
	ms := func(ds []time.Duration) []int64 {
		var out []int64
		for _, d := range ds {
			out = append(out, d.Milliseconds())
		}
		return out
	}
	if got, want := ms(r.LateWaits), []int64{500, 100, 0, 200, 35000}; !equal(got, want) {
		t.Fatalf("late waits %v ms, want %v", got, want)
	}
	if got, want := ms(r.FaultLateWaits), []int64{100, 0, 35000}; !equal(got, want) {
		t.Fatalf("late waits that overlapped a node fault %v ms, want %v", got, want)
	}
	if r.LateP50 != 200*time.Millisecond || r.LateP99 != 35*time.Second || r.FaultLateP50 != 100*time.Millisecond || r.FaultLateP99 != 35*time.Second {
		t.Fatalf("p50 %s p99 %s, fault p50 %s p99 %s", r.LateP50, r.LateP99, r.FaultLateP50, r.FaultLateP99)
	}
	if l := r.Line(); !strings.Contains(l, " broker_waits=5 late_wait_p50_s=0.20 late_wait_p99_s=35.00 fault_waits=3 fault_late_wait_p50_s=0.10 fault_late_wait_p99_s=35.00 ") {
		t.Fatalf("line %s", l)
	}
}

func equal(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
