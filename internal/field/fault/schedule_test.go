package fault

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

// gen is Generate, failing t on an error.
func gen(t *testing.T, seed int64, d time.Duration, version int) Schedule {
	t.Helper()
	s, err := Generate(seed, d, version)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestGenerateSameSeedSameSchedule(t *testing.T) {
	for v := 1; v <= Version; v++ {
		for _, d := range []time.Duration{time.Minute, 4 * time.Minute, 10 * time.Minute} {
			a, b := gen(t, 7, d, v), gen(t, 7, d, v)
			if !reflect.DeepEqual(a, b) {
				t.Fatalf("seed 7, %s, version %d: two schedules differ:\n%s\n%s", d, v, a, b)
			}
			if a.String() != b.String() {
				t.Fatalf("seed 7, %s, version %d: printed differently", d, v)
			}
		}
		// Different seeds give different schedules (nearly always).
		seen := map[string]int64{}
		for seed := int64(1); seed <= 50; seed++ {
			s := gen(t, seed, 4*time.Minute, v).String()
			body := s[strings.Index(s, "\n"):]
			if prev, ok := seen[body]; ok {
				t.Errorf("version %d: seeds %d and %d give the same faults:\n%s", v, prev, seed, s)
			}
			seen[body] = seed
		}
	}
}

// TestGenerateVersions: version 1 never draws PartitionLeader; version 2
// draws it for some seeds (not all), with a fallback node; there is no
// version 0 nor one past Version.
func TestGenerateVersions(t *testing.T) {
	with := 0
	for seed := int64(0); seed < 200; seed++ {
		if n := gen(t, seed, 4*time.Minute, 1).Count(PartitionLeader); n != 0 {
			t.Fatalf("seed %d: version 1 drew %d %s", seed, n, PartitionLeader)
		}
		s := gen(t, seed, 4*time.Minute, 2)
		if s.Version != 2 || !strings.HasPrefix(s.String(), fmt.Sprintf("schedule seed=%d version=2 ", seed)) {
			t.Fatalf("seed %d: not marked version 2:\n%s", seed, s)
		}
		if s.Count(PartitionLeader) > 0 {
			with++
		}
	}
	if with < 40 || with > 180 {
		t.Fatalf("version 2 drew %s in %d of 200 schedules of 4m, want some but not all", PartitionLeader, with)
	}
	for _, v := range []int{0, -1, Version + 1} {
		if s, err := Generate(1, 4*time.Minute, v); err == nil {
			t.Fatalf("version %d: no error, schedule:\n%s", v, s)
		}
	}
}

// TestGenerateIsPinned: a seed recorded from a failing field run must
// replay the same schedule later (FIELD.md, issue 30); this pins the
// generator's output for one seed, so a change to it is seen here first.
func TestGenerateIsPinned(t *testing.T) {
	got := gen(t, 1, 4*time.Minute, 1).String()
	if strings.TrimSpace(got) != strings.TrimSpace(pinned) {
		t.Fatalf("Generate(1, 4m) changed; recorded seeds would replay other schedules. got:\n%s\nwant:\n%s", got, pinned)
	}
}

const pinned = `schedule seed=1 version=1 duration=4m0s faults=8 partitions=4 overlaps=3
  +22s      for 10s    pg-kill
  +48s      for 13s    partition f3 f1,f2
  +49s      for 0s     conn-cut
  +1m9s     for 40s    partition f2 f1,f3
  +1m13s    for 8s     pg-kill
  +1m34s    for 0s     pg-restart
  +2m3s     for 13s    partition-oneway f2 f1
  +3m11s    for 24s    partition-oneway f1 f3

`

func TestGenerateShape(t *testing.T) {
	nodes := map[string]bool{"f1": true, "f2": true, "f3": true}
	for v := 1; v <= Version; v++ {
		testGenerateShape(t, v, nodes)
	}
}

func testGenerateShape(t *testing.T, v int, nodes map[string]bool) {
	for _, d := range []time.Duration{2 * time.Minute, 4 * time.Minute, 10 * time.Minute, time.Hour} {
		for seed := int64(-5); seed < 300; seed++ {
			s := gen(t, seed, d, v)
			if s.Seed != seed || s.Duration != d {
				t.Fatalf("seed %d, %s: header %d %s", seed, d, s.Seed, s.Duration)
			}
			if s.Count(Partition) < 1 {
				t.Fatalf("seed %d, %s: no partition:\n%s", seed, d, s)
			}
			if s.Overlaps() < 1 {
				t.Fatalf("seed %d, %s: no two faults overlap:\n%s", seed, d, s)
			}
			if want := int((d - warmUp - quietTail) / perFault); len(s.Faults) < want/2 {
				t.Fatalf("seed %d, %s: %d faults, want about %d:\n%s", seed, d, len(s.Faults), want, s)
			}
			for i, f := range s.Faults {
				if f.At < warmUp || f.End() > d-quietTail {
					t.Fatalf("seed %d, %s: %s outside [%s, %s]", seed, d, f, warmUp, d-quietTail)
				}
				if i > 0 && f.At < s.Faults[i-1].At {
					t.Fatalf("seed %d, %s: not ordered by At:\n%s", seed, d, s)
				}
				for _, g := range s.Faults[i+1:] {
					if category(f.Kind) == category(g.Kind) && overlap(f, g) {
						t.Fatalf("seed %d, %s: %s and %s overlap:\n%s", seed, d, f, g, s)
					}
					if strandsNode(f, g) || strandsNode(g, f) {
						t.Fatalf("seed %d, %s: %s and %s: a node restarted alone in a partition:\n%s", seed, d, f, g, s)
					}
				}
				checkArgs(t, f, nodes)
			}
		}
	}
}

func checkArgs(t *testing.T, f Fault, nodes map[string]bool) {
	t.Helper()
	group := func(g string) map[string]bool {
		m := map[string]bool{}
		for _, n := range strings.Split(g, ",") {
			if !nodes[n] {
				t.Fatalf("%s: %q is not a node", f, n)
			}
			m[n] = true
		}
		return m
	}
	switch f.Kind {
	case PartitionLeader:
		if len(f.Args) != 2 || f.Args[0] != "else" || !nodes[f.Args[1]] {
			t.Fatalf("%s: want else and a fallback node", f)
		}
		if f.For < leaderFind+12*time.Second {
			t.Fatalf("%s: not a noticeable cut after the time set aside to find the node", f)
		}
	case Partition, PartitionOneway:
		if len(f.Args) != 2 {
			t.Fatalf("%s: want two groups", f)
		}
		a, b := group(f.Args[0]), group(f.Args[1])
		for n := range a {
			if b[n] {
				t.Fatalf("%s: %s on both sides", f, n)
			}
		}
		if f.For <= 0 {
			t.Fatalf("%s: lasts no time", f)
		}
	case IsolateClients, KillNode, Restart:
		if len(f.Args) != 1 || !nodes[f.Args[0]] {
			t.Fatalf("%s: want one node", f)
		}
	case Netem:
		if len(f.Args) < 3 || !nodes[f.Args[0]] {
			t.Fatalf("%s: want a node and netem arguments", f)
		}
		for i := 1; i < len(f.Args); i += 2 {
			if f.Args[i] != "loss" && f.Args[i] != "rate" {
				t.Fatalf("%s: %q is not something field.sh can do on this kernel", f, f.Args[i])
			}
		}
	case Rolling, PGKill, PGRestart, ConnCut:
		if len(f.Args) != 0 {
			t.Fatalf("%s: want no args", f)
		}
	case KillRelay, KillConsumer:
		if len(f.Args) != 1 {
			t.Fatalf("%s: want a role", f)
		}
	default:
		t.Fatalf("%s: unknown kind", f)
	}
}

func TestGenerateShortWindows(t *testing.T) {
	for v := 1; v <= Version; v++ {
		if s := gen(t, 3, 20*time.Second, v); len(s.Faults) != 0 {
			t.Fatalf("version %d: 20s leaves no window after warm-up and tail, got:\n%s", v, s)
		}
		for seed := int64(0); seed < 100; seed++ {
			s := gen(t, seed, time.Minute, v)
			if len(s.Faults) < 1 {
				t.Fatalf("version %d, seed %d, 1m: no fault", v, seed)
			}
			for _, f := range s.Faults {
				if f.At < warmUp || f.End() > time.Minute-quietTail {
					t.Fatalf("version %d, seed %d, 1m: %s outside the window", v, seed, f)
				}
			}
		}
	}
}

// TestStrandsNode: a node fault may overlap a partition only on its
// majority side; a rolling restart never.
func TestStrandsNode(t *testing.T) {
	s := time.Second
	p := Fault{At: 20 * s, For: 30 * s, Kind: Partition, Args: []string{"f1", "f2,f3"}}
	cases := []struct {
		n    Fault
		want bool
	}{
		{Fault{At: 25 * s, For: 10 * s, Kind: KillNode, Args: []string{"f1"}}, true},
		{Fault{At: 25 * s, For: 10 * s, Kind: KillNode, Args: []string{"f2"}}, false},
		{Fault{At: 10 * s, For: 45 * s, Kind: Restart, Args: []string{"f1"}}, true},
		{Fault{At: 60 * s, For: 10 * s, Kind: KillNode, Args: []string{"f1"}}, false},
		{Fault{At: 0, For: 150 * s, Kind: Rolling}, true},
		{Fault{At: 25 * s, For: 10 * s, Kind: Netem, Args: []string{"f1", "loss", "5%"}}, false},
	}
	for _, c := range cases {
		if got := strandsNode(c.n, p); got != c.want {
			t.Errorf("strandsNode(%s, %s) = %v, want %v", c.n, p, got, c.want)
		}
	}
	// The leader's partition may cut any node: no node fault overlaps it.
	l := Fault{At: 20 * s, For: 30 * s, Kind: PartitionLeader, Args: []string{"else", "f1"}}
	for _, n := range []Fault{
		{At: 25 * s, For: 10 * s, Kind: KillNode, Args: []string{"f2"}},
		{At: 10 * s, For: 45 * s, Kind: Restart, Args: []string{"f3"}},
	} {
		if !strandsNode(n, l) {
			t.Errorf("strandsNode(%s, %s) = false, want true", n, l)
		}
	}
	if n := (Fault{At: 60 * s, For: 10 * s, Kind: KillNode, Args: []string{"f2"}}); strandsNode(n, l) {
		t.Errorf("strandsNode(%s, %s) = true, want false", n, l)
	}
}

func TestOverlap(t *testing.T) {
	s := time.Second
	cases := []struct {
		f, g Fault
		want bool
	}{
		{Fault{At: 10 * s, For: 10 * s}, Fault{At: 15 * s, For: 10 * s}, true},
		{Fault{At: 10 * s, For: 10 * s}, Fault{At: 20 * s, For: 10 * s}, false},
		{Fault{At: 10 * s, For: 10 * s}, Fault{At: 12 * s}, true},
		{Fault{At: 12 * s}, Fault{At: 10 * s, For: 10 * s}, true},
		{Fault{At: 10 * s, For: 10 * s}, Fault{At: 20 * s}, false},
		{Fault{At: 10 * s}, Fault{At: 10 * s}, false},
	}
	for _, c := range cases {
		if got := overlap(c.f, c.g); got != c.want {
			t.Errorf("overlap(%s, %s) = %v, want %v", c.f, c.g, got, c.want)
		}
	}
}
