package check

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq-go/internal/field/history"
)

// rungRun is clean() plus m5: published, failed twice, hopped at 20 s to
// the rung field.work.retry.3s (TTL 3 s, so it expires at 23 s), which
// lives on f1; f1 is cut from f2,f3 from 21 s to 50 s; m5 is nowhere at
// the end, in the classic mode. Every field of the attribution holds, so
// m5 is rung_lost.
func rungRun() Input {
	in := clean()
	in.Rungs = RungsClassic
	in.Records = append(in.Records,
		history.Record{T: at(15), Proc: "publisher", Kind: history.KindPublished, ID: "m5", Expect: history.EndHandled},
		history.Record{T: at(15.5), Proc: "worker", Kind: history.KindAttempt, ID: "m5", Attempt: 1},
		history.Record{T: at(19.9), Proc: "worker", Kind: history.KindAttempt, ID: "m5", Attempt: 2},
		history.Record{T: at(20), Proc: "worker", Kind: history.KindRungHop, ID: "m5", Queue: "field.work.retry.3s"},
	)
	in.RungTTL = map[string]time.Duration{"field.work.retry.3s": 3 * time.Second}
	in.RungNodes = []RungPlace{{Queue: "field.work.retry.3s", Node: "f1", At: at(0)}}
	in.FaultLog = []FaultSpan{
		{Kind: "netem", Args: []string{"f1", "loss", "5%"}, Start: at(5), End: at(30)},
		{Kind: "partition", Args: []string{"f1", "f2,f3"}, Start: at(21), End: at(50)},
	}
	in.Tolerance = 15 * time.Second
	in.Nodes = []string{"f1", "f2", "f3"}
	return in
}

func TestRungLossAttributed(t *testing.T) {
	r := Check(rungRun())
	if !r.OK() || r.Lost != 0 || r.RungLost != 1 || len(r.RungLosses) != 1 {
		t.Fatalf("lost=%d rung_lost=%d violations %+v; want lost=0 rung_lost=1 and no violation", r.Lost, r.RungLost, r.Violations)
	}
	l := r.RungLosses[0]
	if l.ID != "m5" || l.Queue != "field.work.retry.3s" || l.Node != "f1" || !l.Expiry.Equal(at(23)) || l.Fault.Kind != "partition" {
		t.Fatalf("attribution %+v", l)
	}
	if !strings.Contains(r.Line(), " lost=0 rung_lost=1 ") {
		t.Fatalf("line %s", r.Line())
	}
	var b bytes.Buffer
	r.Report(&b, 10)
	if !strings.Contains(b.String(), "rung_lost m5") || !strings.Contains(b.String(), "field.work.retry.3s") {
		t.Fatalf("the report does not name the rung loss:\n%s", b.String())
	}
}

// A node killed (SIGKILL, then started) is cut from the majority as long
// as it is down, and a rung that moved is judged where it lived at expiry.
func TestRungLossNodeKilledAfterMove(t *testing.T) {
	in := rungRun()
	in.RungNodes = append(in.RungNodes, RungPlace{Queue: "field.work.retry.3s", Node: "f3", At: at(18)})
	in.FaultLog = []FaultSpan{{Kind: "kill", Args: []string{"f3"}, Start: at(22), End: at(40)}}
	r := Check(in)
	if !r.OK() || r.RungLost != 1 || r.RungLosses[0].Node != "f3" {
		t.Fatalf("lost=%d rung_lost=%d losses %+v violations %+v", r.Lost, r.RungLost, r.RungLosses, r.Violations)
	}
}

// Each case breaks one link of the evidence: the loss stays a loss.
func TestRungLossNotAttributed(t *testing.T) {
	for _, c := range []struct {
		name string
		edit func(*Input)
	}{
		{"another node cut at expiry", func(in *Input) {
			in.FaultLog[1].Args = []string{"f2", "f1,f3"}
		}},
		{"the rung's node cut in a minority of its own only", func(in *Input) {
			// one way from f1 to f2: f1 still has f3, a majority
			in.FaultLog[1].Kind, in.FaultLog[1].Args = "partition-oneway", []string{"f1", "f2"}
		}},
		{"expiry before the cut, beyond the tolerance", func(in *Input) {
			in.FaultLog[1].Start = at(23 + 16)
		}},
		{"expiry after the heal, beyond the tolerance", func(in *Input) {
			in.FaultLog[1].Start, in.FaultLog[1].End = at(0), at(23-16)
		}},
		{"a longer TTL expires after the heal", func(in *Input) {
			in.RungTTL["field.work.retry.3s"] = time.Minute
		}},
		{"seen home after the hop", func(in *Input) {
			in.Records = append(in.Records, history.Record{T: at(52), Proc: "worker", Kind: history.KindAttempt, ID: "m5", Attempt: 3})
		}},
		{"last event not a rung hop", func(in *Input) {
			in.Records = in.Records[:len(in.Records)-1]
		}},
		{"a hop to a queue that is not a known rung", func(in *Input) {
			in.Records[len(in.Records)-1].Queue = "field.work"
		}},
		{"the rung's node unknown at expiry", func(in *Input) {
			in.RungNodes[0].At = at(30)
		}},
		{"no cut in the fault log", func(in *Input) {
			in.FaultLog = in.FaultLog[:1]
		}},
		{"a client cut is not a node cut", func(in *Input) {
			in.FaultLog[1].Kind, in.FaultLog[1].Args = "isolate-clients", []string{"f1"}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := rungRun()
			c.edit(&in)
			r := Check(in)
			if r.RungLost != 0 || r.Lost != 1 || r.OK() {
				t.Fatalf("lost=%d rung_lost=%d ok=%v; want the loss unexplained (lost=1 rung_lost=0)", r.Lost, r.RungLost, r.OK())
			}
			expectOne(t, r, "lost", "m5")
		})
	}
}

// A message that waits in a rung at the end is stuck, not lost of any kind.
func TestRungWaitingIsStuckNotRungLost(t *testing.T) {
	in := rungRun()
	in.Remaining = []Place{{ID: "m5", Where: "field.work.retry.3s"}}
	r := Check(in)
	if r.RungLost != 0 || r.Lost != 0 || r.Stuck != 1 {
		t.Fatalf("lost=%d rung_lost=%d stuck=%d", r.Lost, r.RungLost, r.Stuck)
	}
}

// Seed 1625172487: the rung's node f1 stayed with the majority, but the
// home queue's leader f3 was cut from f1,f2 1.3-4.5 s before the rungs'
// TTLs expired. RabbitMQ dead-letters from the classic rung at most once,
// and the home quorum queue had no reachable leader until f3 was seen
// down: the same loss, judged on where the home queue led at expiry.
func TestRungLossHomeLeaderCut(t *testing.T) {
	in := rungRun()
	in.RungNodes = append(in.RungNodes, RungPlace{Queue: "field.work", Node: "f3", At: at(1)})
	in.FaultLog = []FaultSpan{{Kind: "partition", Args: []string{"f3", "f1,f2"}, Start: at(21.7), End: at(62)}}
	r := Check(in)
	if !r.OK() || r.Lost != 0 || r.RungLost != 1 || len(r.RungLosses) != 1 {
		t.Fatalf("lost=%d rung_lost=%d violations %+v; want lost=0 rung_lost=1", r.Lost, r.RungLost, r.Violations)
	}
	if l := r.RungLosses[0]; l.Node != "f1" || l.Home != "f3" {
		t.Fatalf("attribution %+v: want the rung on f1 and the home queue's leader f3", l)
	}
	// The same with the home queue led elsewhere at expiry (it moved to
	// f2 before the cut): nothing explains the loss.
	in.RungNodes = append(in.RungNodes, RungPlace{Queue: "field.work", Node: "f2", At: at(10)})
	if r := Check(in); r.OK() || r.Lost != 1 || r.RungLost != 0 {
		t.Fatalf("home queue led by f2 at expiry: lost=%d rung_lost=%d; want lost=1 rung_lost=0", r.Lost, r.RungLost)
	}
}

// A partition-leader is logged as the cut it made (fault.Run resolves the
// node when it fires): its node is cut from the majority as by a
// partition, for the rung's node and for the home queue's leader alike.
func TestRungLossPartitionLeader(t *testing.T) {
	in := rungRun()
	in.FaultLog[1].Kind = "partition-leader"
	if r := Check(in); !r.OK() || r.RungLost != 1 || r.RungLosses[0].Fault.Kind != "partition-leader" {
		t.Fatalf("rung's node cut by partition-leader: lost=%d rung_lost=%d violations %+v; want lost=0 rung_lost=1", r.Lost, r.RungLost, r.Violations)
	}
	in = rungRun()
	in.RungNodes = append(in.RungNodes, RungPlace{Queue: "field.work", Node: "f3", At: at(1)})
	in.FaultLog = []FaultSpan{{Kind: "partition-leader", Args: []string{"f3", "f1,f2"}, Start: at(21.7), End: at(62)}}
	if r := Check(in); !r.OK() || r.RungLost != 1 || r.RungLosses[0].Home != "f3" {
		t.Fatalf("home queue's leader cut by partition-leader: lost=%d rung_lost=%d losses %+v", r.Lost, r.RungLost, r.RungLosses)
	}
	// Another node cut: still unexplained.
	in.FaultLog[0].Args = []string{"f2", "f1,f3"}
	if r := Check(in); r.OK() || r.Lost != 1 || r.RungLost != 0 {
		t.Fatalf("f2 cut: lost=%d rung_lost=%d; want lost=1 rung_lost=0", r.Lost, r.RungLost)
	}
}

// Seed 5012933: the rung (and, as last recorded, the home queue) lived on
// f1; f3 was partitioned from f1,f2 and, while that lasted, f2 was killed.
// Neither fault alone cuts f1 from the majority, but together they leave
// f1 alone: the home quorum queue had no majority and so no leader when
// the rung's TTL expired, and the dead-letter (at most once) was lost.
// Faults in force together are judged together; one of them alone is not.
func TestRungLossFaultsTogetherLeaveNoMajority(t *testing.T) {
	in := rungRun()
	in.RungNodes = append(in.RungNodes, RungPlace{Queue: "field.work", Node: "f1", At: at(0)})
	in.FaultLog = []FaultSpan{
		{Kind: "partition", Args: []string{"f3", "f1,f2"}, Start: at(2), End: at(44)},
		{Kind: "kill", Args: []string{"f2"}, Start: at(22), End: at(68)},
	}
	r := Check(in)
	if !r.OK() || r.Lost != 0 || r.RungLost != 1 || len(r.RungLosses) != 1 {
		t.Fatalf("lost=%d rung_lost=%d violations %+v; want lost=0 rung_lost=1", r.Lost, r.RungLost, r.Violations)
	}
	l := r.RungLosses[0]
	if l.Node != "f1" || len(l.With) != 1 {
		t.Fatalf("attribution %+v: want the rung on f1, cut by two faults together", l)
	}
	var b bytes.Buffer
	r.Report(&b, 10)
	if !strings.Contains(b.String(), "partition f3 f1,f2") || !strings.Contains(b.String(), "kill f2") {
		t.Fatalf("the report does not name both faults:\n%s", b.String())
	}
	// Either fault alone leaves f1 with a majority: the loss is not explained.
	for _, f := range in.FaultLog {
		one := in
		one.FaultLog = []FaultSpan{f}
		if r := Check(one); r.OK() || r.Lost != 1 || r.RungLost != 0 {
			t.Fatalf("%s %v alone: lost=%d rung_lost=%d; want lost=1 rung_lost=0", f.Kind, f.Args, r.Lost, r.RungLost)
		}
	}
	// Faults that do not overlap the expiry do not add up.
	apart := in
	apart.FaultLog = []FaultSpan{
		{Kind: "partition", Args: []string{"f3", "f1,f2"}, Start: at(2), End: at(5)},
		{Kind: "kill", Args: []string{"f2"}, Start: at(22), End: at(68)},
	}
	if r := Check(apart); r.OK() || r.Lost != 1 || r.RungLost != 0 {
		t.Fatalf("faults apart in time: lost=%d rung_lost=%d; want lost=1 rung_lost=0", r.Lost, r.RungLost)
	}
}

// Seed 1224374815 (one-way cuts): the rung lives on f1 and the home queue
// is led by f2; packets from f2 to f1 are dropped. Neither node is cut
// from the majority (each still reaches f3), but the link between them
// dies (f1's sends to f2 go unacknowledged), so the rung's dead-letter to
// the home queue's leader cannot arrive, and RabbitMQ does it at most
// once. A cut that separates the rung's node from the home queue's leader
// explains the loss; a cut elsewhere does not.
func TestRungLossRungCutFromHomeLeader(t *testing.T) {
	in := rungRun()
	in.RungNodes = append(in.RungNodes, RungPlace{Queue: "field.work", Node: "f2", At: at(1)})
	in.FaultLog = []FaultSpan{{Kind: "partition-oneway", Args: []string{"f2", "f1"}, Start: at(18), End: at(45)}}
	r := Check(in)
	if !r.OK() || r.Lost != 0 || r.RungLost != 1 || len(r.RungLosses) != 1 {
		t.Fatalf("lost=%d rung_lost=%d violations %+v; want lost=0 rung_lost=1", r.Lost, r.RungLost, r.Violations)
	}
	if l := r.RungLosses[0]; l.Node != "f1" || l.Home != "f2" {
		t.Fatalf("attribution %+v: want the rung on f1 cut from the home queue's leader f2", l)
	}
	for _, args := range [][]string{{"f1", "f2"}, {"f2", "f1,f3"}} {
		in.FaultLog[0].Args = args
		if r := Check(in); r.RungLost != 1 {
			t.Fatalf("cut %v between rung and home leader: lost=%d rung_lost=%d; want rung_lost=1", args, r.Lost, r.RungLost)
		}
	}
	in.FaultLog[0].Args = []string{"f2", "f3"}
	if r := Check(in); r.OK() || r.Lost != 1 || r.RungLost != 0 {
		t.Fatalf("cut f2->f3 only: lost=%d rung_lost=%d; want lost=1 rung_lost=0", r.Lost, r.RungLost)
	}
}
