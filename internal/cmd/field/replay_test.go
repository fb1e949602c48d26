//go:build field

package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"
)

// failedSeeds are the seeds `make field` failed on, each replayed by
// TestReplayFailedSeeds with the duration and the schedule's version
// (fault.Generate's) it failed at.
var failedSeeds = []struct {
	seed, duration, version, why string
}{
	// 5 confirmed messages lost, each after its second attempt failed and
	// went to the broker rung field.work.retry.3s (a classic queue, whose
	// TTL dead-lettering back to the quorum queue is at-most-once), 15 s
	// after a partition of f2 from f1,f3 healed: not in field.work, its
	// rung, .dlq or .parked at the end.
	{"101525401", "4m", "1", "lost=5 through the broker rung after a partition"},
	// The same loss: 5 messages whose second attempt failed at +42 s and
	// hopped to field.work.retry.3s on f1, cut from f2,f3 at +44 s.
	{"1537774916", "4m", "1", "lost=5 through the broker rung during a partition"},
	// reordered=19: the inbox consumer's node f3 was partitioned, then its
	// connection cut; it resubscribed on f1 and handled new orders while
	// the window RabbitMQ had sent to f3 came back, redelivered, when f3
	// was seen down. The broker's (docs/reliability.md, InOrder): the
	// checker counts it as reordered_held (the replay: reordered=0,
	// reordered_held=10).
	{"256532473", "4m", "1", "reordered=19 held by the broker across a partition and a connection cut"},
}

// TestReplayFailedSeeds runs the field (scripts/field.sh, the whole
// workload, the seed's schedule) once per failed seed and wants the
// checker's verdict clean: no violation (exit 0) and lost=0. A loss in a
// broker rung whose node was cut from the majority when its TTL expired is
// counted apart (rung_lost, check.RungLoss: contract §2 makes rungs classic
// queues, whose dead-lettering is at most once) and passes; any loss
// without that evidence fails. It takes about 10 minutes a seed:
//
//	go test -tags field -run TestReplayFailedSeeds -timeout 60m -v ./internal/cmd/field
func TestReplayFailedSeeds(t *testing.T) {
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(root, "scripts", "field.sh")
	for _, s := range failedSeeds {
		t.Run(s.seed, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
			defer cancel()
			up := exec.CommandContext(ctx, script, "up")
			up.Dir, up.Stdout, up.Stderr = root, os.Stderr, os.Stderr
			t.Cleanup(func() {
				down := exec.Command(script, "down")
				down.Dir, down.Stdout, down.Stderr = root, os.Stderr, os.Stderr
				_ = down.Run()
			})
			if err := up.Run(); err != nil {
				t.Fatalf("field.sh up: %v", err)
			}
			cmd := exec.CommandContext(ctx, "go", "run", "./internal/cmd/field", "-mode", "field")
			cmd.Dir = root
			cmd.Env = append(os.Environ(), "SEED="+s.seed, "DURATION="+s.duration, "SCHEDULE_VERSION="+s.version)
			cmd.Stderr = os.Stderr
			out, err := cmd.Output()
			line := regexp.MustCompile(`(?m)^FIELD .*$`).Find(out)
			t.Logf("%s", line)
			if err != nil || !regexp.MustCompile(` lost=0 rung_lost=[0-9]+ duplicate_effects=0 reordered=0 stuck=0 `).Match(line) {
				t.Fatalf("seed %s (%s) fails again: %v\n%s", s.seed, s.why, err, line)
			}
			if m := regexp.MustCompile(` rung_lost=([0-9]+) `).FindSubmatch(line); m != nil && string(m[1]) != "0" {
				t.Logf("seed %s: %s message(s) lost in a broker rung cut from the majority, attributed (awaits a contract change)", s.seed, m[1])
			}
		})
	}
}
