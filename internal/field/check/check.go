package check

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/acemq/acemq-go/internal/field/history"
	"github.com/acemq/acemq-go/topology"
)

// The modes of the workload's broker waits (Input.Rungs).
const (
	// RungsDurable: the scripted queue's broker waits go through durable
	// rungs (quorum queues that dead-letter at least once): a message lost
	// from one is lost, with no carve-out. The field's default.
	RungsDurable = "durable"
	// RungsClassic: they go through classic rungs (FIELD_RUNGS=classic),
	// kept for comparison: a loss RungLoss explains is counted apart, as
	// rung_lost.
	RungsClassic = "classic"
)

// Order is an order the database holds (its transaction committed).
type Order struct {
	ID  string
	Key string
	Seq int
}

// Effect is one row of the inbox handler's effects table: N is its
// insertion number (a bigserial), so effects sort in the order they were
// written.
type Effect struct {
	N       int64
	OrderID string
	Key     string
	Seq     int
	T       time.Time
}

// Place is a message (or outbox row) still waiting when the bound ran out,
// and where.
type Place struct {
	ID    string
	Where string
}

// Input is everything the checker judges.
type Input struct {
	Seed     int64
	Duration time.Duration
	// Rungs is the mode the run's broker waits went through: RungsClassic,
	// or RungsDurable (also when empty).
	Rungs string
	// ScheduleVersion is the version of the fault schedule's generator
	// the run used (fault.Version for a new run); 0 when the schedule has
	// none (-mode cluster's drill).
	ScheduleVersion int
	// Records: every worker's history, in time order.
	Records []history.Record
	// Orders: the orders table at the end (committed orders only).
	Orders []Order
	// Effects: the effects table at the end.
	Effects []Effect
	// DLQ and Parked: the message ids found in the scripted queue's .dlq
	// and .parked at the end.
	DLQ, Parked []string
	// Remaining: what was still queued or unpublished at the end.
	Remaining []Place
	// Heals: when each fault ended (its cut healed, its node back, its
	// process restarted); heal times are measured from each.
	Heals []time.Time
	// Counts of the schedule, printed as they are.
	Faults, Partitions, Kills, Restarts int

	// What the checker needs to attribute a loss to a broker rung (see
	// RungLoss): each rung's TTL, where each rung queue lived, the fault
	// log, and the tolerance around a cut (the cluster's detection window:
	// about 1.5 net_ticktime).
	RungTTL   map[string]time.Duration
	RungNodes []RungPlace
	FaultLog  []FaultSpan
	Tolerance time.Duration
	// Nodes is the cluster's nodes (f1, f2, f3): a node is cut from the
	// majority when fewer than a majority of them are on its side.
	Nodes []string
}

// RungPlace says that the rung queue Queue lived on Node (a field node's
// short name, f1) from At on, as the orchestrator found it.
type RungPlace struct {
	Queue string    `json:"queue"`
	Node  string    `json:"node"`
	At    time.Time `json:"t"`
}

// FaultSpan is one fault of the run as its log has it: its kind and
// arguments (as fault.Fault's), when it started and when it ended (zero:
// it never logged an end, so it counts until the last heal).
type FaultSpan struct {
	Kind       string
	Args       []string
	Start, End time.Time
}

// RungLoss is a confirmed message lost in a way contract §2 forces: its
// last event was a confirmed hop to a classic broker rung (in the
// RungsClassic mode only; a durable rung's loss is lost), the
// rung's node was cut from the majority when the rung's TTL expired, and
// it never came home. RabbitMQ dead-letters from a classic queue at most
// once, so the message can vanish there; the FIELD line counts it as
// rung_lost, apart from lost.
type RungLoss struct {
	ID    string
	Queue string
	Node  string
	// Home is the node leading the rung's home queue at the expiry when
	// the fault cut that node, not the rung's, from the majority (the
	// dead-letter had no leader to reach); empty when the rung's node was
	// the one cut.
	Home   string
	Hop    time.Time
	Expiry time.Time
	Fault  FaultSpan
	// With is the other faults in force at the expiry that, together with
	// Fault and none of them alone, left the node without a majority (a
	// partition and a kill on the two other nodes, say); empty when Fault
	// alone did.
	With []FaultSpan
}

// Violation is one broken invariant: which, the message or order it is
// about, what was seen, and every history record that names it.
type Violation struct {
	Invariant string
	ID        string
	What      string
	History   []history.Record
}

// Result is the checker's verdict.
type Result struct {
	In                                *Input
	Published, Committed, Effects     int
	Lost, DuplicateEffects, Reordered int
	Stuck                             int
	// RungLost counts the losses RungLosses explains: not violations of
	// what the library can promise, but printed loudly.
	RungLost         int
	RungLosses       []RungLoss
	HealP50, HealP99 time.Duration
	Heals            []time.Duration
	// LateWaits is how late each broker wait ended (LateWaits), and
	// LateP50, LateP99 its quantiles; FaultLateWaits and FaultLateP50,
	// FaultLateP99 the same for the waits that overlapped a node fault.
	LateWaits, FaultLateWaits  []time.Duration
	LateP50, LateP99           time.Duration
	FaultLateP50, FaultLateP99 time.Duration
	Violations                 []Violation
	// ReorderedHeld counts, and Held shows, reorders the broker made: the
	// late order came redelivered, so RabbitMQ had sent it before to a
	// consumer whose node then died or was cut off, kept it checked out
	// there, and sent what was behind it to the consumer resubscribed on
	// another node (docs/reliability.md, InOrder). They are not the
	// library's and break no invariant it promises.
	ReorderedHeld int
	Held          []Violation
}

// OK is true when no invariant was broken.
func (r Result) OK() bool { return len(r.Violations) == 0 }

// Line is the one FIELD line of issue 30: rungs= names the mode of the
// broker waits, rung_lost= is there in the classic mode only (in the
// durable one a rung's loss is in lost=), and late_wait_*_s are the
// quantiles of LateWaits (all broker waits, then those that overlapped a
// node fault: fault_waits= of them).
func (r Result) Line() string {
	in := r.In
	rungLost := ""
	if in.classic() {
		rungLost = fmt.Sprintf(" rung_lost=%d", r.RungLost)
	}
	return fmt.Sprintf("FIELD seed=%d duration=%s schedule_version=%d rungs=%s faults=%d partitions=%d kills=%d restarts=%d published=%d committed=%d effects=%d lost=%d%s duplicate_effects=%d reordered=%d stuck=%d heal_p50_s=%.1f heal_p99_s=%.1f broker_waits=%d late_wait_p50_s=%.2f late_wait_p99_s=%.2f fault_waits=%d fault_late_wait_p50_s=%.2f fault_late_wait_p99_s=%.2f reordered_held=%d",
		in.Seed, in.Duration, in.ScheduleVersion, in.mode(), in.Faults, in.Partitions, in.Kills, in.Restarts,
		r.Published, r.Committed, r.Effects, r.Lost, rungLost, r.DuplicateEffects, r.Reordered, r.Stuck,
		r.HealP50.Seconds(), r.HealP99.Seconds(),
		len(r.LateWaits), r.LateP50.Seconds(), r.LateP99.Seconds(),
		len(r.FaultLateWaits), r.FaultLateP50.Seconds(), r.FaultLateP99.Seconds(), r.ReorderedHeld)
}

// classic says whether the run's waits went through classic rungs.
func (in Input) classic() bool { return in.Rungs == RungsClassic }

// mode is the run's mode as the FIELD line prints it.
func (in Input) mode() string {
	if in.classic() {
		return RungsClassic
	}
	return RungsDurable
}

// Report writes every rung loss (RungLoss: not a violation, but never
// silent) and the reorders the broker made (Held), then each violation with its history (at most max of them, and
// the number left out), naming the seed that replays it.
func (r Result) Report(w io.Writer, max int) {
	if len(r.Held) > 0 {
		fmt.Fprintf(w, "field: %d reorder(s) held by the broker (a redelivery; docs/reliability.md, InOrder)\n", len(r.Held))
		writeViolations(w, r.Held, max)
	}
	if len(r.RungLosses) > 0 {
		fmt.Fprintf(w, "field: RUNG_LOST %d confirmed message(s) lost in a broker rung whose node, or its home queue's leader, was cut from the majority, or from each other, when the rung's TTL expired: RabbitMQ dead-letters from a classic queue at most once, and contract §2 makes rungs classic queues (this awaits a contract change; %s replays it)\n", len(r.RungLosses), r.In.replay())
		for _, l := range r.RungLosses {
			cut := ""
			if l.Home != "" {
				cut = ", its home queue led by " + l.Home + ","
			}
			with := ""
			for _, f := range l.With {
				with += fmt.Sprintf(" with %s %s (%s to %s)", f.Kind, strings.Join(f.Args, " "), stamp(f.Start), stamp(f.End))
			}
			fmt.Fprintf(w, "rung_lost %s: hopped to %s (on %s%s) at %s, TTL expired %s, within %s of %s %s (%s to %s)%s\n",
				l.ID, l.Queue, l.Node, cut, stamp(l.Hop), stamp(l.Expiry), r.In.Tolerance, l.Fault.Kind, strings.Join(l.Fault.Args, " "), stamp(l.Fault.Start), stamp(l.Fault.End), with)
		}
	}
	if r.OK() {
		return
	}
	fmt.Fprintf(w, "field: %d violation(s); replay with %s\n", len(r.Violations), r.In.replay())
	writeViolations(w, r.Violations, max)
}

// writeViolations writes at most max of vs, each with its history.
func writeViolations(w io.Writer, vs []Violation, max int) {
	for i, v := range vs {
		if i == max {
			fmt.Fprintf(w, "… and %d more\n", len(vs)-max)
			break
		}
		fmt.Fprintf(w, "%s %s: %s\n", v.Invariant, v.ID, v.What)
		for _, h := range v.History {
			re := ""
			if h.Redelivered {
				re = "redelivered "
			}
			fmt.Fprintf(w, "    %s %-12s %-16s id=%s key=%s seq=%d expect=%s attempt=%d %s%s\n",
				h.T.UTC().Format("15:04:05.000"), h.Proc, h.Kind, h.ID, h.Key, h.Seq, h.Expect, h.Attempt, re, h.Err)
		}
	}
}

// Check judges in.
func Check(in Input) Result {
	r := Result{In: &in}
	byID := map[string][]history.Record{}
	for _, h := range in.Records {
		if h.ID != "" {
			byID[h.ID] = append(byID[h.ID], h)
		}
	}
	violate := func(inv, id, what string) {
		r.Violations = append(r.Violations, Violation{Invariant: inv, ID: id, What: what, History: byID[id]})
	}
	remaining := map[string]string{}
	for _, p := range in.Remaining {
		remaining[p.ID] = p.Where
	}
	stuck := map[string]bool{}
	markStuck := func(id string) {
		if !stuck[id] {
			stuck[id] = true
			r.Stuck++
			violate("stuck", id, "still in "+remaining[id]+" when the bound after the last heal ran out")
		}
	}

	// Plain publishes: each confirmed one at the end its script names.
	handled := map[string]bool{}
	for _, h := range in.Records {
		if h.Kind == history.KindHandled {
			handled[h.ID] = true
		}
	}
	ends := map[string]map[string]bool{history.EndHandled: handled, history.EndDLQ: set(in.DLQ), history.EndParked: set(in.Parked)}
	confirmed := map[string]string{}
	var order []string
	for _, h := range in.Records {
		if h.Kind == history.KindPublished {
			if _, seen := confirmed[h.ID]; !seen {
				order = append(order, h.ID)
			}
			confirmed[h.ID] = h.Expect
		}
	}
	r.Published = len(confirmed)
	for _, id := range order {
		want := confirmed[id]
		end, known := ends[want]
		if !known {
			violate("lost", id, fmt.Sprintf("confirmed with an unknown end %q", want))
			r.Lost++
			continue
		}
		if end[id] {
			continue
		}
		if _, ok := remaining[id]; ok {
			markStuck(id)
			continue
		}
		var seen []string
		for _, e := range []string{history.EndHandled, history.EndDLQ, history.EndParked} {
			if ends[e][id] {
				seen = append(seen, e)
			}
		}
		if l, ok := rungLoss(&in, id, byID[id]); ok && len(seen) == 0 {
			r.RungLost++
			r.RungLosses = append(r.RungLosses, l)
			continue
		}
		r.Lost++
		violate("lost", id, fmt.Sprintf("confirmed, its script ends in %s, found at %v", want, seen))
	}

	// Orders: each committed one has exactly one effect; nothing else has one.
	committed := map[string]Order{}
	for _, o := range in.Orders {
		committed[o.ID] = o
	}
	r.Committed = len(committed)
	effects := map[string]int{}
	for _, e := range in.Effects {
		effects[e.OrderID]++
	}
	r.Effects = len(in.Effects)
	ids := make([]string, 0, len(committed))
	for id := range committed {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		switch n := effects[id]; {
		case n == 0:
			if _, ok := remaining[id]; ok {
				markStuck(id)
				continue
			}
			r.Lost++
			violate("lost", id, "committed, no effect, and waiting nowhere")
		case n > 1:
			r.DuplicateEffects += n - 1
			violate("duplicate_effect", id, fmt.Sprintf("committed once, effect written %d times through the inbox", n))
		}
	}
	var uncommitted []string
	for id := range effects {
		if _, ok := committed[id]; !ok {
			uncommitted = append(uncommitted, id)
		}
	}
	sort.Strings(uncommitted)
	for _, id := range uncommitted {
		r.DuplicateEffects += effects[id]
		violate("rolledback_delivered", id, fmt.Sprintf("never committed (rolled back), yet its effect exists %d time(s)", effects[id]))
	}
	// The history against the database: a commit it reported must be
	// there, a rollback must not.
	for _, h := range in.Records {
		switch h.Kind {
		case history.KindCommitted:
			if _, ok := committed[h.ID]; !ok {
				r.Lost++
				violate("lost", h.ID, "the writer saw its commit succeed, the orders table does not hold it")
			}
		case history.KindRolledBack:
			if _, ok := committed[h.ID]; ok {
				violate("rolledback_committed", h.ID, "the writer rolled it back, the orders table holds it")
			}
		}
	}
	// Anything else still waiting is stuck too (a message whose publish
	// was not confirmed, say: no promise it arrives, but it must not hang).
	rest := make([]string, 0, len(remaining))
	for id := range remaining {
		rest = append(rest, id)
	}
	sort.Strings(rest)
	for _, id := range rest {
		markStuck(id)
	}

	// Order per key, in the order effects were written.
	eff := append([]Effect(nil), in.Effects...)
	sort.SliceStable(eff, func(i, j int) bool { return eff[i].N < eff[j].N })
	top := map[string]Effect{}
	seenOnce := map[string]bool{}
	for _, e := range eff {
		if seenOnce[e.OrderID] {
			continue // a duplicate is counted as one already
		}
		seenOnce[e.OrderID] = true
		if e.Key == "" {
			continue
		}
		if t, ok := top[e.Key]; ok && e.Seq < t.Seq {
			v := Violation{Invariant: "reordered", ID: e.OrderID,
				What:    fmt.Sprintf("key %s: seq %d took effect (#%d) after seq %d (#%d, order %s)", e.Key, e.Seq, e.N, t.Seq, t.N, t.OrderID),
				History: append(append([]history.Record(nil), byID[t.OrderID]...), byID[e.OrderID]...)}
			if redelivered(byID[e.OrderID]) {
				v.Invariant = "reordered_held"
				r.ReorderedHeld++
				r.Held = append(r.Held, v)
				continue
			}
			r.Reordered++
			r.Violations = append(r.Violations, v)
			continue
		}
		top[e.Key] = e
	}

	r.Heals = healTimes(in)
	r.HealP50, r.HealP99 = quantile(r.Heals, 0.50), quantile(r.Heals, 0.99)
	r.LateWaits, r.FaultLateWaits = lateWaits(in, byID)
	r.LateP50, r.LateP99 = quantile(r.LateWaits, 0.50), quantile(r.LateWaits, 0.99)
	r.FaultLateP50, r.FaultLateP99 = quantile(r.FaultLateWaits, 0.50), quantile(r.FaultLateWaits, 0.99)
	return r
}

// lateWaits measures how late each broker wait ended: for each confirmed
// hop to a rung (its wait read from the rung's name), the first time the
// scripted handler ran on the message after it (it came home), minus the
// hop's time and the wait. The hop is recorded at its confirm, a little
// after the message entered the rung, so a wait can look early by the
// confirm's delay: that counts as 0, not late. A hop that never came home
// is left out (it is lost or stuck, and counted there). faulted is those
// whose time in the rung, hop to home, overlapped a node fault of the log
// (a cut between nodes, a node killed or restarted, a rolling restart):
// the waits a dead-letter worker may have had to retry after a heal.
func lateWaits(in Input, byID map[string][]history.Record) (all, faulted []time.Duration) {
	var lastHeal time.Time
	for _, h := range in.Heals {
		if h.After(lastHeal) {
			lastHeal = h
		}
	}
	for _, hop := range in.Records {
		if hop.Kind != history.KindRungHop {
			continue
		}
		_, wait, _, ok := topology.ParseRung(hop.Queue)
		if !ok {
			continue
		}
		var home time.Time
		for _, h := range byID[hop.ID] {
			if (h.Kind == history.KindAttempt || h.Kind == history.KindHandled) && h.T.After(hop.T) && (home.IsZero() || h.T.Before(home)) {
				home = h.T
			}
		}
		if home.IsZero() {
			continue
		}
		late := home.Sub(hop.T) - wait
		if late < 0 {
			late = 0
		}
		all = append(all, late)
		for _, f := range in.FaultLog {
			end := f.End
			if end.IsZero() {
				end = lastHeal
			}
			if nodeFault(f) && !f.Start.After(home) && (end.IsZero() || !end.Before(hop.T)) {
				faulted = append(faulted, late)
				break
			}
		}
	}
	return all, faulted
}

// nodeFault says whether f cuts nodes apart or takes one down: the faults
// that move a queue's leader or stall a dead-letter.
func nodeFault(f FaultSpan) bool {
	switch f.Kind {
	case "partition", "partition-oneway", "partition-leader", "kill", "restart", "rolling":
		return true
	}
	return false
}

// healTimes: for each heal, how long until every kind of progress the run
// makes (a confirmed publish, a handled message, an effect) happened
// again after it; a kind with no progress after a heal at all is left out
// of that heal (the producers stop at the end).
func healTimes(in Input) []time.Duration {
	kinds := map[string][]time.Time{}
	for _, h := range in.Records {
		switch h.Kind {
		case history.KindPublished, history.KindHandled, history.KindCommitted:
			kinds[h.Kind] = append(kinds[h.Kind], h.T)
		}
	}
	for _, e := range in.Effects {
		if !e.T.IsZero() {
			kinds["effect"] = append(kinds["effect"], e.T)
		}
	}
	for _, ts := range kinds {
		sort.Slice(ts, func(i, j int) bool { return ts[i].Before(ts[j]) })
	}
	var out []time.Duration
	for _, h := range in.Heals {
		var worst time.Duration
		any := false
		for _, ts := range kinds {
			i := sort.Search(len(ts), func(i int) bool { return !ts[i].Before(h) })
			if i == len(ts) {
				continue
			}
			any = true
			if d := ts[i].Sub(h); d > worst {
				worst = d
			}
		}
		if any {
			out = append(out, worst)
		}
	}
	return out
}

// quantile is the nearest-rank q-quantile of ds (0 when empty).
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	k := int(math.Ceil(q*float64(len(s)))) - 1
	if k < 0 {
		k = 0
	}
	return s[k]
}

// redelivered: a handler ran on a redelivery of the order (the broker had
// sent it before).
func redelivered(hs []history.Record) bool {
	for _, h := range hs {
		if h.Kind == history.KindEffect && h.Redelivered {
			return true
		}
	}
	return false
}

func set(ids []string) map[string]bool {
	m := make(map[string]bool, len(ids))
	for _, id := range ids {
		m[id] = true
	}
	return m
}

// Summary is a short human line of the violations by invariant.
func (r Result) Summary() string {
	n := map[string]int{}
	for _, v := range r.Violations {
		n[v.Invariant]++
	}
	keys := make([]string, 0, len(n))
	for k := range n {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%d", k, n[k]))
	}
	return strings.Join(parts, " ")
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("15:04:05.000")
}

// rungLoss says whether the lost message id is a RungLoss, on the
// evidence only: its last event (the publisher's confirm aside, which can
// come late) is a confirmed hop to a rung whose TTL is known; the rung's
// node at the expiry (hop + TTL) is known; and a fault of the log cut that
// node, or the node leading the rung's home queue at the expiry (recorded
// the same way), from the majority at the expiry, or cut the rung's node
// from that leader, give or take in.Tolerance.
func rungLoss(in *Input, id string, hist []history.Record) (RungLoss, bool) {
	var last *history.Record
	for i := range hist {
		h := &hist[i]
		if h.Kind == history.KindPublished || h.Kind == history.KindPublishFailed {
			continue
		}
		if last == nil || !h.T.Before(last.T) {
			last = h
		}
	}
	if last == nil || last.Kind != history.KindRungHop {
		return RungLoss{}, false
	}
	// Only a classic rung dead-letters at most once: a durable rung's loss,
	// or any loss in the durable mode, is a loss.
	home, _, durable, isRung := topology.ParseRung(last.Queue)
	if !in.classic() || !isRung || durable {
		return RungLoss{}, false
	}
	ttl, ok := in.RungTTL[last.Queue]
	if !ok {
		return RungLoss{}, false
	}
	expiry := last.T.Add(ttl)
	node := placeAt(in.RungNodes, last.Queue, expiry)
	if node == "" {
		return RungLoss{}, false
	}
	// The rung <queue>.retry.<d> dead-letters to <queue> (contract §1).
	home = placeAt(in.RungNodes, home, expiry)
	var lastHeal time.Time
	for _, h := range in.Heals {
		if h.After(lastHeal) {
			lastHeal = h
		}
	}
	// The faults in force at the expiry, give or take the tolerance.
	var near []FaultSpan
	for _, f := range in.FaultLog {
		end := f.End
		if end.IsZero() {
			end = lastHeal
		}
		if expiry.Before(f.Start.Add(-in.Tolerance)) || (!end.IsZero() && expiry.After(end.Add(in.Tolerance))) {
			continue
		}
		near = append(near, f)
	}
	loss := RungLoss{ID: id, Queue: last.Queue, Node: node, Hop: last.T, Expiry: expiry}
	for _, f := range near {
		loss.Fault = f
		if cutFromMajority(f, node, in.Nodes) {
			return loss, true
		}
		if home != "" && (cutFromMajority(f, home, in.Nodes) || home != node && separates(f, node, home)) {
			loss.Home = home
			return loss, true
		}
	}
	// No one fault did it; together they may have: the node reaches fewer
	// than a majority once every node they cut it from or took down is
	// counted out (the home queue then has no leader that the dead-letter
	// could reach).
	if len(near) > 1 {
		if used := cutTogether(near, node, in.Nodes); len(used) > 1 {
			loss.Fault, loss.With = used[0], used[1:]
			return loss, true
		}
	}
	return RungLoss{}, false
}

// replay is what `make field` takes to run the same schedule again.
func (in Input) replay() string {
	s := fmt.Sprintf("SEED=%d DURATION=%s", in.Seed, in.Duration)
	if in.ScheduleVersion != 0 {
		s += fmt.Sprintf(" SCHEDULE_VERSION=%d", in.ScheduleVersion)
	}
	return s
}

// sides is the two groups of nodes a partition, one-way cut or
// partition-leader put apart (a partition-leader is logged as the cut it
// made: its node, the others); ok is false for any other fault.
func sides(f FaultSpan) (a, b []string, ok bool) {
	switch f.Kind {
	case "partition", "partition-oneway", "partition-leader":
		if len(f.Args) == 2 {
			return strings.Split(f.Args[0], ","), strings.Split(f.Args[1], ","), true
		}
	}
	return nil, nil, false
}

// separates says whether fault f puts nodes a and b on the two sides of a
// cut, either way round (a one-way cut kills the link both ways: what one
// side sends goes unacknowledged).
func separates(f FaultSpan, a, b string) bool {
	x, y, ok := sides(f)
	return ok && (contains(x, a) && contains(y, b) || contains(x, b) && contains(y, a))
}

// cutTogether says which of the faults, taken together, leave node with
// fewer than a majority of the nodes it can reach (each one counting out
// the nodes it cuts node from or takes down); nil when they do not.
func cutTogether(faults []FaultSpan, node string, nodes []string) []FaultSpan {
	out := map[string]bool{}
	var used []FaultSpan
	for _, f := range faults {
		gone := unreachable(f, node)
		if len(gone) == 0 {
			continue
		}
		used = append(used, f)
		for _, n := range gone {
			out[n] = true
		}
	}
	reach := 0
	for _, n := range nodes {
		if !out[n] {
			reach++
		}
	}
	if 2*reach > len(nodes) {
		return nil
	}
	return used
}

// unreachable is the nodes fault f cuts node from or takes down (node
// itself when f takes node down); empty when f leaves node all it had.
func unreachable(f FaultSpan, node string) []string {
	switch f.Kind {
	case "kill", "restart":
		if len(f.Args) > 0 {
			return f.Args[:1]
		}
	}
	a, b, _ := sides(f)
	switch {
	case contains(a, node):
		return b
	case contains(b, node):
		return a
	}
	return nil
}

// placeAt is the node queue lived on (led, for a quorum queue) at t, as
// last recorded at or before t; empty when unknown.
func placeAt(places []RungPlace, queue string, t time.Time) string {
	node := ""
	var since time.Time
	for _, p := range places {
		if p.Queue == queue && !p.At.After(t) && !p.At.Before(since) {
			node, since = p.Node, p.At
		}
	}
	return node
}

// cutFromMajority says whether fault f leaves node with fewer than a
// majority of nodes it can reach: a partition or a one-way cut whose far
// side holds a majority's worth of the others, or the node down (killed,
// restarted, or in a rolling restart, which takes each node down in turn
// and is logged as one span). A partition-leader is logged as the cut it
// made (its node, the others), so it is judged as a partition.
func cutFromMajority(f FaultSpan, node string, nodes []string) bool {
	switch f.Kind {
	case "kill", "restart":
		return len(f.Args) > 0 && f.Args[0] == node
	case "rolling":
		return true
	case "partition", "partition-oneway", "partition-leader":
		far := unreachable(f, node)
		if len(far) == 0 {
			return false
		}
		reach := 0
		for _, n := range nodes {
			if !contains(far, n) {
				reach++
			}
		}
		return 2*reach <= len(nodes)
	}
	return false
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}
