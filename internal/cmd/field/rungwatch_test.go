package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/acemq/acemq-go/internal/field/workload"
)

// TestRungWatchStops: once stop has returned, the watch looks no more (a
// leader that moves after it is not recorded).
func TestRungWatchStops(t *testing.T) {
	dir := t.TempDir()
	node := filepath.Join(dir, "node")
	script := filepath.Join(dir, "field.sh")
	if err := os.WriteFile(node, []byte("f1"), 0o644); err != nil {
		t.Fatal(err)
	}
	// queue-nodes PREFIX: the work queue on the node the file names.
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho \"${2}work $(cat "+node+")\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	w := &rungWatch{o: options{script: script, out: dir}, s: site{names: workload.Names{Prefix: "field."}}}
	stop := w.watch(context.Background(), 10*time.Millisecond)
	for deadline := time.Now().Add(time.Minute); len(w.all()) == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			stop()
			t.Fatal("the watch recorded nothing within a minute")
		}
	}
	stop()
	stop() // a second stop is a no-op
	if err := os.WriteFile(node, []byte("f2"), 0o644); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // thirty periods
	if got := w.all(); len(got) != 1 || got[0].Node != "f1" {
		t.Fatalf("after stop the watch recorded %+v, want only field.work on f1", got)
	}
}
