package fault

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// Kind names a fault, as printed in a schedule.
type Kind string

// The kinds of fault a schedule holds.
const (
	// Partition cuts Erlang distribution both ways between two groups of
	// nodes: Args are the groups, e.g. ["f1", "f2,f3"].
	Partition Kind = "partition"
	// PartitionOneway drops packets from one node to another only: Args
	// are [FROM, TO].
	PartitionOneway Kind = "partition-oneway"
	// IsolateClients drops client (AMQP) traffic to and from one node,
	// which still sees the others: Args are [fN].
	IsolateClients Kind = "isolate-clients"
	// KillNode ends a node with SIGKILL and starts it again after For:
	// Args are [fN].
	KillNode Kind = "kill"
	// Restart stops a node gracefully and starts it again: Args are [fN].
	Restart Kind = "restart"
	// Rolling restarts f1, f2 and f3 one after the other (the upgrade
	// drill); no Args.
	Rolling Kind = "rolling"
	// Netem makes the link to one node slow or lossy for For: Args are
	// field.sh's netem arguments, e.g. ["f2", "loss", "5%"].
	Netem Kind = "netem"
	// PGRestart restarts the field's PostgreSQL; no Args.
	PGRestart Kind = "pg-restart"
	// PGKill ends the field's PostgreSQL with SIGKILL and starts it again
	// after For; no Args.
	PGKill Kind = "pg-kill"
	// KillRelay kills an outbox relay process with SIGKILL (Procs.Kill):
	// Args are ["relay"].
	KillRelay Kind = "kill-relay"
	// KillConsumer kills a consumer process with SIGKILL (Procs.Kill): Args
	// are ["consumer"].
	KillConsumer Kind = "kill-consumer"
	// ConnCut cuts the workload's connections (Procs.CutConnections); no
	// Args.
	ConnCut Kind = "conn-cut"
)

// Fault is one fault of a schedule.
type Fault struct {
	// At is the offset from the schedule's start; For how long the fault
	// lasts (for restart and rolling, the time set aside for them: they
	// last as long as the restarts take).
	At, For time.Duration
	Kind    Kind
	Args    []string
}

// End is when the fault is planned to end, as an offset from the start.
func (f Fault) End() time.Duration { return f.At + f.For }

// String prints the fault on one line: offset, duration, kind, arguments.
func (f Fault) String() string {
	s := fmt.Sprintf("+%-8s for %-6s %s", f.At.Round(time.Second), f.For.Round(time.Second), f.Kind)
	if len(f.Args) > 0 {
		s += " " + strings.Join(f.Args, " ")
	}
	return s
}

// Schedule is a seed's faults, ordered by At, over Duration.
type Schedule struct {
	Seed     int64
	Duration time.Duration
	Faults   []Fault
}

// String prints the schedule: a header line with the seed, then one fault a
// line.
func (s Schedule) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "schedule seed=%d duration=%s faults=%d partitions=%d overlaps=%d\n", s.Seed, s.Duration, len(s.Faults), s.Count(Partition, PartitionOneway), s.Overlaps())
	for _, f := range s.Faults {
		b.WriteString("  ")
		b.WriteString(f.String())
		b.WriteByte('\n')
	}
	return b.String()
}

// Count is how many faults of the given kinds the schedule holds.
func (s Schedule) Count(kinds ...Kind) int {
	n := 0
	for _, f := range s.Faults {
		for _, k := range kinds {
			if f.Kind == k {
				n++
				break
			}
		}
	}
	return n
}

// category groups the kinds that must not overlap each other.
func category(k Kind) string {
	switch k {
	case Partition, PartitionOneway, IsolateClients:
		return "net"
	case Netem:
		return "netem"
	case KillNode, Restart, Rolling:
		return "node"
	case PGRestart, PGKill:
		return "pg"
	default:
		return "proc"
	}
}

// IsCut reports whether the fault is held in place by nftables rules that
// field.sh cut-ok checks.
func (f Fault) IsCut() bool { return category(f.Kind) == "net" }

// rng is splitmix64: fully specified here, so a seed gives the same
// schedule whatever Go's math/rand does in later releases.
type rng struct{ s uint64 }

func (r *rng) next() uint64 {
	r.s += 0x9e3779b97f4a7c15
	z := r.s
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// intn is uniform in [0, n) (n > 0), by rejection.
func (r *rng) intn(n int) int {
	max := ^uint64(0) - ^uint64(0)%uint64(n)
	for {
		v := r.next()
		if v < max {
			return int(v % uint64(n))
		}
	}
}

// between is uniform in [lo, hi], to the second.
func (r *rng) between(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(r.intn(int((hi-lo)/time.Second)+1))*time.Second
}

func (r *rng) node() string { return fmt.Sprintf("f%d", 1+r.intn(3)) }

// others is the two nodes that are not n, as a group "fX,fY".
func others(n string) string {
	var o []string
	for _, m := range []string{"f1", "f2", "f3"} {
		if m != n {
			o = append(o, m)
		}
	}
	return strings.Join(o, ",")
}

// Timings the generator works with. A partition mostly outlasts the field's
// net_ticktime (10 s: a cut node is seen down after 10-15 s); one in five
// is shorter, a blip the cluster may not notice.
const (
	warmUp     = 10 * time.Second // no fault before: the workload starts
	quietTail  = 15 * time.Second // no fault after Duration minus this
	sameGap    = 5 * time.Second  // between two faults of one category
	restartFor = 45 * time.Second // set aside for a graceful restart
	rollingFor = 150 * time.Second
	perFault   = 25 * time.Second // one fault per this much of the window
)

// weights: how often each kind is drawn.
var weights = []struct {
	k Kind
	w int
}{
	{Partition, 6}, {PartitionOneway, 2}, {IsolateClients, 2},
	{KillNode, 3}, {Restart, 2}, {Rolling, 1},
	{Netem, 3}, {PGRestart, 1}, {PGKill, 1},
	{KillRelay, 2}, {KillConsumer, 2}, {ConnCut, 2},
}

func (r *rng) kind() Kind {
	total := 0
	for _, w := range weights {
		total += w.w
	}
	x := r.intn(total)
	for _, w := range weights {
		if x < w.w {
			return w.k
		}
		x -= w.w
	}
	panic("unreachable")
}

// draw makes a fault of kind k (At not set).
func (r *rng) draw(k Kind) Fault {
	f := Fault{Kind: k}
	switch k {
	case Partition:
		if r.intn(5) == 0 {
			f.For = r.between(4*time.Second, 8*time.Second)
		} else {
			f.For = r.between(12*time.Second, 45*time.Second)
		}
		n := r.node()
		f.Args = []string{n, others(n)}
	case PartitionOneway:
		f.For = r.between(10*time.Second, 30*time.Second)
		a := r.node()
		b := strings.Split(others(a), ",")[r.intn(2)]
		f.Args = []string{a, b}
	case IsolateClients:
		f.For = r.between(10*time.Second, 30*time.Second)
		f.Args = []string{r.node()}
	case KillNode:
		f.For = r.between(5*time.Second, 25*time.Second)
		f.Args = []string{r.node()}
	case Restart:
		f.For = restartFor
		f.Args = []string{r.node()}
	case Rolling:
		f.For = rollingFor
	case Netem:
		f.For = r.between(15*time.Second, 40*time.Second)
		f.Args = []string{r.node()}
		switch r.intn(3) {
		case 0:
			f.Args = append(f.Args, "loss", fmt.Sprintf("%d%%", 2+r.intn(14)))
		case 1:
			f.Args = append(f.Args, "rate", []string{"256kbit", "1mbit", "4mbit"}[r.intn(3)])
		default:
			f.Args = append(f.Args, "loss", fmt.Sprintf("%d%%", 2+r.intn(8)), "rate", []string{"1mbit", "4mbit"}[r.intn(2)])
		}
	case PGKill:
		f.For = r.between(3*time.Second, 15*time.Second)
	case PGRestart:
	case KillRelay:
		f.Args = []string{"relay"}
	case KillConsumer:
		f.Args = []string{"consumer"}
	case ConnCut:
	}
	return f
}

// fits reports whether f can join faults: inside [warmUp, d-quietTail] and
// apart from every fault of its category.
func fits(f Fault, faults []Fault, d time.Duration) bool {
	if f.At < warmUp || f.End() > d-quietTail {
		return false
	}
	for _, g := range faults {
		if category(g.Kind) == category(f.Kind) && f.At < g.End()+sameGap && g.At < f.End()+sameGap {
			return false
		}
	}
	return true
}

// Generate draws the schedule of seed over d: about one fault per 25 s of
// the window between a 10 s warm-up and a 15 s quiet tail, at least one
// partition when d >= 2m, and the second fault (when there is room for
// two) starting while the first lasts. The same seed and d give the same
// schedule.
func Generate(seed int64, d time.Duration) Schedule {
	s := Schedule{Seed: seed, Duration: d}
	window := d - warmUp - quietTail
	if window <= 0 {
		return s
	}
	r := &rng{s: uint64(seed)}
	want := int(window / perFault)
	if want < 1 {
		want = 1
	}
	var faults []Fault
	place := func(f Fault, lo, hi time.Duration) bool {
		if hi > d-quietTail-f.For {
			hi = d - quietTail - f.For
		}
		if lo < warmUp {
			lo = warmUp
		}
		for try := 0; try < 20 && hi >= lo; try++ {
			f.At = r.between(lo, hi)
			if fits(f, faults, d) {
				faults = append(faults, f)
				return true
			}
		}
		return false
	}
	// The first fault: a partition the cluster notices (longer than
	// net_ticktime) when the window allows one; in a shorter window, any
	// fault that lasts and fits.
	placed := false
	for try := 0; try < 50 && !placed; try++ {
		var first Fault
		if d >= 2*time.Minute {
			if first = r.draw(Partition); first.For < 12*time.Second {
				continue
			}
		} else if first = r.draw(r.kind()); first.For == 0 {
			continue
		}
		placed = place(first, warmUp, warmUp+window/3) || place(first, warmUp, d)
	}
	if !placed {
		return s
	}
	// The second starts while the first lasts.
	if want >= 2 {
		f0 := faults[0]
		for try := 0; try < 20; try++ {
			k := r.kind()
			if category(k) == category(f0.Kind) {
				continue
			}
			lo := f0.At
			if f0.For > 0 {
				lo = f0.At + time.Second
			}
			if place(r.draw(k), lo, f0.End()-time.Second) {
				break
			}
		}
	}
	for try := 0; len(faults) < want && try < 50*want; try++ {
		place(r.draw(r.kind()), warmUp, d)
	}
	sort.SliceStable(faults, func(i, j int) bool { return faults[i].At < faults[j].At })
	s.Faults = faults
	return s
}

// Overlaps is how many pairs of faults of the schedule overlap in time (a
// fault of no duration overlaps those it falls inside).
func (s Schedule) Overlaps() int {
	n := 0
	for i, f := range s.Faults {
		for _, g := range s.Faults[i+1:] {
			if overlap(f, g) {
				n++
			}
		}
	}
	return n
}

// overlap: two lasting faults share some time, or an instant one falls
// inside a lasting one.
func overlap(f, g Fault) bool {
	switch {
	case f.For == 0 && g.For == 0:
		return false
	case f.For == 0:
		return g.At <= f.At && f.At < g.End()
	case g.For == 0:
		return f.At <= g.At && g.At < f.End()
	}
	return g.At < f.End() && f.At < g.End()
}
