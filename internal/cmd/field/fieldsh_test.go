//go:build field

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// fieldSh is scripts/field.sh's path and a call of it from the
// repository's root: sh runs the script with args and returns its stdout,
// trimmed, failing t when the script fails.
func fieldSh(t *testing.T) (script string, sh func(args ...string) string) {
	root, _ := filepath.Abs("../../..")
	script = filepath.Join(root, "scripts", "field.sh")
	return script, func(args ...string) string {
		t.Helper()
		c := exec.Command(script, args...)
		c.Dir, c.Stderr = root, os.Stderr
		out, err := c.Output()
		if err != nil {
			t.Fatalf("field.sh %v: %v", args, err)
		}
		return strings.TrimSpace(string(out))
	}
}
