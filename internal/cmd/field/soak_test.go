package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq-go/internal/field/history"
)

// The table sums each worker's last sample in a bin, takes the broker's
// backlog and the channel count, and leaves a missing channel count NaN.
func TestSoakTable(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	st := func(s float64, proc string, x history.Stats) history.Record {
		return history.Record{T: t0.Add(time.Duration(s * float64(time.Second))), Proc: proc, Kind: history.KindStats, Stats: &x}
	}
	recs := []history.Record{
		st(0, "worker", history.Stats{RSSKiB: 1024, Goroutines: 5, FDs: 10, Conns: 1, LagMS: 300, Done: 1}),
		st(5, "worker", history.Stats{RSSKiB: 2048, Goroutines: 6, FDs: 11, Conns: 1, LagMS: 200, Done: 2}),
		st(6, "inbox", history.Stats{RSSKiB: 1024, Goroutines: 7, FDs: 12, Conns: 1, LagMS: 1500, Done: 3}),
		st(7, "broker", history.Stats{Backlog: 42, Channels: -1}),
		st(8, "channels", history.Stats{Channels: 9}),
		st(16, "worker", history.Stats{RSSKiB: 2048, Goroutines: 6, FDs: 11, Conns: 0, Done: 4}),
		{T: t0.Add(17 * time.Second), Proc: "worker", Kind: history.KindHandled, ID: "m1"},
		st(18, "channels", history.Stats{Channels: -1}),
	}
	path := filepath.Join(t.TempDir(), "soak.tsv")
	if err := writeSoak(path, "", recs, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := "minute\tprocs\trss_mib\tgoroutines\tfds\tconns\tchannels\tbacklog\tlag_s\tdone\n" +
		"0.00\t2\t3.0\t13\t23\t2\t9\t42\t1.5\t5\n" +
		"0.25\t1\t2.0\t6\t11\t0\tNaN\tNaN\t0.0\t4\n"
	if string(b) != want {
		t.Fatalf("table\n%s\nwant\n%s", b, want)
	}
}

// The drill of -mode cluster is the same for one seed, and another for
// another.
func TestDrillReplays(t *testing.T) {
	a, b, c := newDrill(5, 4*time.Minute).String(), newDrill(5, 4*time.Minute).String(), newDrill(6, 4*time.Minute).String()
	if a != b || a == c || strings.Count(a, "\n") < 8 {
		t.Fatalf("seed 5:\n%s\nagain:\n%s\nseed 6:\n%s", a, b, c)
	}
}

// TestChannelsReturnsWhenTheControlHangs replays the soak of seed
// 655878138: rabbitmqctl (run through field.sh and chroot) hung in its
// first call, the context's kill reached only the direct child, a
// grandchild kept the output pipe open, and channels waited on it for the
// whole hour, so the broker's channel column stayed empty and the soak
// never wrote its table (its final Wait blocked on the sampler). channels
// must give up (-1) soon after its context ends, whatever the command left
// behind.
func TestChannelsReturnsWhenTheControlHangs(t *testing.T) {
	// The shell forks a sleeper that inherits stdout, then sleeps itself.
	s := site{ctl: []string{"sh", "-c", "sleep 120 & sleep 120", "sh"}}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	got := make(chan int, 1)
	start := time.Now()
	go func() { got <- channels(ctx, s) }()
	select {
	case n := <-got:
		if n != -1 {
			t.Fatalf("channels = %d from a control that printed nothing, want -1", n)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Fatalf("channels returned after %s, want within 10s of its context's end", d)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("channels still waiting 20s after its context ended (a grandchild holds its output)")
	}
}
