package main

import (
	"context"
	"testing"
	"time"
)

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
