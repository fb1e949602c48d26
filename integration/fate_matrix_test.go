//go:build integration

package integration

// The fate matrix (issue 38): every fate path against every event, each
// cell run on the real broker and checked against the same invariants:
//
//   - attempts≤N: the handler is called at most the policy's attempts;
//   - no gap:     attempts run 1, 2, 3… with no gap and no repeat (but the
//     repeat of an attempt cut mid-call, and what a kill -9 forgets, as
//     docs/reliability.md says);
//   - waits:      a failed attempt's next one comes no sooner than its wait;
//   - none lost:  every message is somewhere at the end: acknowledged after
//     its handler ran, in .dlq, in .parked, or still in a queue;
//   - one fate:   once, and where its path leads;
//   - order:      handled in the queue's order where InOrder promises it;
//   - outer-once: the app's outermost middleware sees every delivery the
//     consumer receives once, and when next returns, d.Outcome() is the
//     outcome the library carried out (what its DeliveryHook saw).
//
// A cell that cannot happen, or that another cell already is, says why in
// the table (fmTable). The suite prints the matrix when it ends: a line per
// cell, with each invariant ok, n/a or FAILED. The helpers are in
// fate_matrix_rig_test.go.

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// The events of the matrix, the columns.
const (
	evNone    = "none"
	evStop    = "stop"
	evKill    = "kill-9"
	evCut     = "cut"
	evRefuse  = "refuse"
	evMissing = "missing"
	evPanic   = "panic"
	evQuorum  = "quorum"
	evInOrder = "inorder"
	evDLQ     = "dlq-refuses"
	// evAckLost: the connection is cut right after a hop was confirmed,
	// before the original's ack goes out (mq batches acks), so the broker
	// redelivers the original whose fate was carried out.
	evAckLost = "ack-lost"
)

var fmEvents = []string{evNone, evStop, evKill, evCut, evRefuse, evMissing, evPanic, evQuorum, evInOrder, evDLQ, evAckLost}

// fmRow is one path of the matrix: how its messages are handled, and for
// each event that is no cell of its own, why.
type fmRow struct {
	path    fmPath
	notHere map[string]string
	defects map[string]string // event → the issue 38 defects the cell failed with when it landed
}

// Reasons used in more than one row.
const (
	whyNoPublish = "the path publishes nothing: no target to refuse or miss"
	whyNoDLQ     = "the path never writes .dlq"
	// whyHomeRefuses: a queue with reject-publish refuses once its ready
	// messages reach its max-length, and the consumer takes whatever
	// would fill it.
	whyHomeRefuses = "the target is the consumed queue, which cannot be made to refuse while its consumer drains it but by a broker policy, and the shared test broker's settings are not changed"
	// whyPlainAck: what a consumer remembers of a carried-out hop costs a
	// plain ack nothing, so nothing is remembered of one.
	whyPlainAck = "the path carries out no hop, so its ack is a plain one: lost with the connection, the message is handled again, the duplicate at-least-once allows (docs/reliability.md)"
)

var fmTable = []fmRow{
	{path: fmPathAck, notHere: map[string]string{
		evRefuse:  whyNoPublish,
		evMissing: whyNoPublish,
		evDLQ:     whyNoDLQ,
		evAckLost: whyPlainAck,
	}, defects: map[string]string{evCut: "6", evQuorum: "6"}},
	{path: fmPathRequeue, notHere: map[string]string{
		evRefuse:  whyNoPublish + " (a requeue is a basic.reject, never a publish)",
		evMissing: whyNoPublish + " (a requeue is a basic.reject, never a publish)",
		evQuorum:  "the quorum column is three requeues before the path: on this row it is the path itself",
		evDLQ:     whyNoDLQ,
		evAckLost: whyPlainAck,
	}, defects: map[string]string{evNone: "6", evStop: "6", evKill: "6", evCut: "6", evPanic: "6", evInOrder: "6"}},
	{path: fmPathReject, notHere: map[string]string{
		evRefuse: "its target is .dlq: the dlq-refuses column",
	}, defects: map[string]string{evCut: "6", evMissing: "6", evPanic: "4", evQuorum: "6", evDLQ: "5, 6"}},
	{path: fmPathWait, notHere: map[string]string{
		evStop:    "a Stop during an in-process wait is the carried-wait row",
		evRefuse:  whyNoPublish + " (the wait is in the process)",
		evMissing: whyNoPublish + " (the wait is in the process)",
		evDLQ:     whyNoDLQ,
		evAckLost: whyPlainAck,
	}, defects: map[string]string{evCut: "6", evQuorum: "6"}},
	{path: fmPathRung, notHere: map[string]string{
		evDLQ: "the rung path writes .dlq only when its rung is missing: the missing column",
	}, defects: map[string]string{evCut: "6", evRefuse: "3, 6", evPanic: "4", evQuorum: "1, 6"}},
	{path: fmPathDLQ, notHere: map[string]string{
		evRefuse: "its target is .dlq: the dlq-refuses column",
	}, defects: map[string]string{evNone: "7", evCut: "6", evMissing: "6", evPanic: "4", evQuorum: "6", evDLQ: "5, 6"}},
	{path: fmPathParked, notHere: map[string]string{
		evDLQ: "a park never writes .dlq (a refused .parked is the refuse column)",
	}, defects: map[string]string{evCut: "6", evRefuse: "6", evMissing: "6", evPanic: "4", evQuorum: "6"}},
	{path: fmPathCarried, notHere: map[string]string{
		evStop:    "the carried wait is itself a Stop during a wait (its none column)",
		evKill:    "a kill -9 during a wait carries nothing: the in-process wait × kill-9 cell",
		evCut:     "a cut during a wait carries nothing (the channel is gone): the in-process wait × cut cell",
		evRefuse:  whyHomeRefuses,
		evMissing: "the carry goes to the consumed queue itself, which exists while it is consumed",
		evDLQ:     whyNoDLQ,
		evAckLost: "the carry is made by a stopping consumer, so the original's redelivery goes to the next one, which never saw the hop: a duplicate across consumers, as across processes (docs/reliability.md)",
	}, defects: map[string]string{evPanic: "4", evQuorum: "1, 6", evInOrder: "2"}},
	{path: fmPathReplay, notHere: map[string]string{
		evRefuse:  "the move goes to the consumed queue: " + whyHomeRefuses,
		evMissing: "ops.Replay makes the move, not the consumer: an unroutable move stops the replay and keeps the message in .dlq (TestOpsReplayUnroutableStopsAndKeeps)",
		evDLQ:     "after the replay the message is handled: the dlq-refuses column of the .dlq row covers the way there",
		evAckLost: "the replay's copy is acknowledged plainly (" + whyPlainAck + "); its way to .dlq is the dlq row's cell",
	}, defects: map[string]string{evCut: "6", evPanic: "4", evQuorum: "1, 6"}},
	{path: fmPathInbox, notHere: map[string]string{
		evRefuse:  whyNoPublish + " (a duplicate is acknowledged)",
		evMissing: whyNoPublish + " (a duplicate is acknowledged)",
		evInOrder: "both copies carry one id, so there is no order between them to keep; ack × inorder covers the order",
		evDLQ:     whyNoDLQ,
		evAckLost: whyPlainAck,
	}, defects: map[string]string{evNone: "6", evStop: "6", evKill: "6", evCut: "6", evPanic: "6", evQuorum: "6"}},
}

// fmLines are the matrix's printed lines, by cell, in table order.
var fmLines = struct {
	sync.Mutex
	m map[string]string
}{m: map[string]string{}}

func fmKey(path, ev string) string { return path + " × " + ev }

// TestFateMatrix runs every cell of fmTable that can happen, a few at a
// time (each cell mostly waits on the broker), and prints the matrix.
func TestFateMatrix(t *testing.T) {
	start := time.Now()
	type job struct {
		row fmRow
		ev  string
	}
	var jobs []job
	for _, row := range fmTable {
		for _, ev := range fmEvents {
			if why, ok := row.notHere[ev]; ok {
				fmRecord(fmKey(row.path.name, ev), "n/a: "+why)
				continue
			}
			jobs = append(jobs, job{row, ev})
		}
	}
	// t.Run may be called from many goroutines at once: the cells run
	// fmWorkers at a time, however -parallel is set.
	work := make(chan job)
	var wg sync.WaitGroup
	for range fmWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range work {
				key := fmKey(j.row.path.name, j.ev)
				t.Run(strings.ReplaceAll(key, " × ", "/"), func(t *testing.T) {
					done := false
					defer func() {
						if !done { // a t.Fatal on the way: fmRun recorded why, if it knew
							fmLines.Lock()
							if _, ok := fmLines.m[key]; !ok {
								fmLines.m[key] = "FAILED before its verdict (see the test log)"
							}
							fmLines.Unlock()
						}
					}()
					v := fmRun(t, j.row.path, j.ev, func(msg string) { fmRecord(key, "FAILED: "+msg) })
					done = true
					line := v.String()
					if d := j.row.defects[j.ev]; d != "" {
						line += " [issue 38 defect " + d + "]"
					}
					fmRecord(key, line)
					if v.failed() {
						t.Errorf("cell %s: %s", key, line)
					}
				})
			}
		}()
	}
	for _, j := range jobs {
		work <- j
	}
	close(work)
	wg.Wait()
	fmPrint(t, time.Since(start))
}

// fmWorkers is how many cells run at once.
const fmWorkers = 6

func fmRecord(key, line string) {
	fmLines.Lock()
	defer fmLines.Unlock()
	fmLines.m[key] = line
}

// fmPrint prints the matrix, a line per cell in table order, to the test's
// output and to the file FATE_MATRIX_OUT names (if set), which `make
// integration` prints whether the run passes or fails.
func fmPrint(t *testing.T, took time.Duration) {
	fmLines.Lock()
	defer fmLines.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "=== FATE MATRIX (issue 38): %d paths × %d events, %v\n", len(fmTable), len(fmEvents), took.Round(time.Second))
	tested, na, failed, skipped := 0, 0, 0, 0
	for _, row := range fmTable {
		for _, ev := range fmEvents {
			line, ok := fmLines.m[fmKey(row.path.name, ev)]
			if !ok {
				line = "not run"
			}
			switch {
			case strings.HasPrefix(line, "n/a"):
				na++
			case line == "not run":
				skipped++
			case strings.Contains(line, "FAILED"):
				failed++
				tested++
			default:
				tested++
			}
			fmt.Fprintf(&b, "cell %-26s %s\n", fmKey(row.path.name, ev)+":", line)
		}
	}
	fmt.Fprintf(&b, "=== %d cells tested (%d failed), %d cannot happen or are another cell, %d not run (-run)\n", tested, failed, na, skipped)
	fmt.Print(b.String())
	if f := os.Getenv("FATE_MATRIX_OUT"); f != "" {
		if err := os.WriteFile(f, []byte(b.String()), 0o644); err != nil {
			t.Errorf("write %s: %v", f, err)
		}
	}
}
