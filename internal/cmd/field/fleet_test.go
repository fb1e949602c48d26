package main

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestFleetStopDuringRestart: stop called while the supervisor is starting
// a worker again (here held at the opening of its log, a FIFO nobody reads
// yet) leaves no process of that worker running once it returns.
func TestFleetStopDuringRestart(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "worker.sh")
	// The first run exits at once (so the supervisor starts it again); any
	// later one runs for a minute.
	script := "#!/bin/sh\n[ -e " + dir + "/ran ] && exec sleep 60\ntouch " + dir + "/ran\n"
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	f := &fleet{bin: bin, out: dir, logf: t.Logf}
	w := f.add("w", "worker", nil)
	t.Cleanup(func() {
		w.mu.Lock()
		cmd := w.cmd
		w.mu.Unlock()
		if cmd != nil {
			_ = cmd.Process.Kill()
		}
	})
	if err := f.start(w); err != nil {
		t.Fatal(err)
	}
	// The supervisor opens the log again a second after the first run
	// exits: make it a FIFO, which blocks that open until it is read.
	log := filepath.Join(dir, "w.log")
	if err := os.Remove(log); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(log, 0o644); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second) // the supervisor is blocked in the open by now
	stopped := make(chan struct{})
	go func() { defer close(stopped); f.stop(30 * time.Second) }()
	time.Sleep(200 * time.Millisecond)
	r, err := os.Open(log) // lets the restart go on
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	select {
	case <-stopped:
	case <-time.After(time.Minute):
		t.Fatal("stop did not return within a minute")
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		w.mu.Lock()
		starts, exited := w.starts, w.exited
		w.mu.Unlock()
		if starts == 2 {
			select {
			case <-exited:
			case <-time.After(2 * time.Second):
				t.Fatal("a process of the worker still runs after stop returned")
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the worker was started %d time(s), want 2 (started again once)", starts)
		}
	}
}
