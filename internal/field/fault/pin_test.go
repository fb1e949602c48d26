package fault

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestGenerateReplaysRecordedSeeds: every seed docs/field.md and
// docs/field-seeds.tsv record (and seed 1) replays, at its duration and
// with version 1 (the generator they ran with), the very faults
// testdata/schedules-v1.txt holds, printed as they were when those runs
// were made: a recorded seed must replay its schedule. Version 2's
// recorded seeds (testdata/schedules-v2.txt) likewise.
func TestGenerateReplaysRecordedSeeds(t *testing.T) {
	for v, least := range map[int]int{1: 20, 2: 3} {
		if n := replaysPinned(t, v); n < least {
			t.Fatalf("only %d schedules in testdata/schedules-v%d.txt", n, v)
		}
	}
}

// replaysPinned compares Generate's faults with version v's pinned ones,
// and says how many schedules it compared.
func replaysPinned(t *testing.T, v int) int {
	f, err := os.Open(fmt.Sprintf("testdata/schedules-v%d.txt", v))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var seed int64
	var d time.Duration
	var want []string
	n := 0
	compare := func() {
		if want == nil {
			return
		}
		n++
		s := gen(t, seed, d, v)
		if s.Version != v || !strings.HasPrefix(s.String(), fmt.Sprintf("schedule seed=%d version=%d duration=%s ", seed, v, d)) {
			t.Errorf("seed=%d duration=%s: the schedule does not say version %d:\n%s", seed, d, v, s)
		}
		var got []string
		for _, g := range s.Faults {
			got = append(got, "  "+g.String())
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("seed=%d duration=%s version %d replays another schedule; got:\n%s\nwant:\n%s", seed, d, v, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		want = nil
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "seed="):
			s, dur, ok := strings.Cut(strings.TrimPrefix(line, "seed="), " duration=")
			if seed, err = strconv.ParseInt(s, 10, 64); !ok || err != nil {
				t.Fatalf("bad line %q", line)
			}
			if d, err = time.ParseDuration(dur); err != nil {
				t.Fatalf("bad line %q: %v", line, err)
			}
			want = []string{}
		case line == "":
			compare()
		default:
			want = append(want, line)
		}
	}
	compare()
	return n
}
