//go:build integration || cluster

package integration

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq-go/internal/testenv"
)

// scriptCutOff runs script's ctl verb (args before the eval) with env (its
// time bound, 5 s) on a call that would sleep ten minutes, and fails the
// test unless the bound cut it off in about that time and left no CLI's VM
// running.
func scriptCutOff(t *testing.T, script, env string, args ...string) {
	t.Helper()
	marker := fmt.Sprintf("timer:sleep(%d)", 600000+time.Now().UnixNano()%1000)
	call := fmt.Sprintf("%s %s eval %s.", script, strings.Join(args, " "), marker)
	c := exec.Command(script, append(args, "eval", marker+".")...)
	c.Env = append(os.Environ(), env)
	// To a file, not a pipe: a CLI left behind would hold a pipe open, and
	// the test would wait on it rather than fail.
	out, err := os.Create(t.TempDir() + "/out")
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	c.Stdout, c.Stderr = out, out
	start := time.Now()
	if err := c.Run(); err == nil {
		b, _ := os.ReadFile(out.Name())
		t.Fatalf("%s succeeded (%s); want it cut off by %s", call, b, env)
	}
	if d := time.Since(start); d > time.Minute {
		t.Fatalf("%s returned after %s, want about 5 s", call, d)
	}
	time.Sleep(2 * time.Second)
	if left := testenv.KillCLIs(marker); len(left) > 0 {
		t.Fatalf("%s timed out after %s and left the CLI's VM running (pids %v, now killed)", call, time.Since(start).Round(time.Second), left)
	}
}
