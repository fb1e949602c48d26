//go:build integration

package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// cliDir holds the acemq binary the CLI and console tests run, built once
// per test binary (acemqCLI) and removed when the tests end.
var cliDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "acemq-cli")
	if err != nil {
		fmt.Fprintln(os.Stderr, "integration: temp dir for the acemq binary:", err)
		os.Exit(1)
	}
	cliDir = dir
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

var (
	cliOnce sync.Once
	cliPath string
	cliErr  error
)

// acemqCLI builds cmd/acemq once per test binary and returns its path.
func acemqCLI(t testing.TB) string {
	t.Helper()
	cliOnce.Do(func() {
		cliPath = filepath.Join(cliDir, "acemq")
		if out, err := exec.Command("go", "build", "-o", cliPath, "github.com/acemq/acemq-go/cmd/acemq").CombinedOutput(); err != nil {
			cliErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if cliErr != nil {
		t.Fatalf("build acemq: %v", cliErr)
	}
	return cliPath
}
