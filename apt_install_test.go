package acemq_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// aptInstall is a command that installs Debian packages.
var aptInstall = regexp.MustCompile(`\bapt(-get)?\s+(-\S+\s+)*install\b`)

// TestAptInstallsGoThroughOneScript holds the Makefile and the scripts to
// one way of installing Debian packages, scripts/apt-install.sh, which
// installs without recommends and without upgrading installed packages,
// and simulates first to say what it installs (issue 39: `make test`'s
// apt step upgraded eleven system packages, systemd among them, without
// saying so).
func TestAptInstallsGoThroughOneScript(t *testing.T) {
	const script = "scripts/apt-install.sh"
	files := []string{"Makefile"}
	for _, glob := range []string{"scripts/*.sh", ".ci/*"} {
		m, err := filepath.Glob(glob)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	for _, f := range files {
		if f == script {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "#") {
				continue
			}
			if aptInstall.MatchString(line) {
				t.Errorf("%s:%d installs with apt itself, not through %s: %s", f, i+1, script, strings.TrimSpace(line))
			}
		}
	}
	b, err := os.ReadFile(script)
	if err != nil {
		t.Fatalf("%s, the one way to install Debian packages, is missing: %v", script, err)
	}
	var install, simulate bool
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "#") || !aptInstall.MatchString(line) {
			continue
		}
		if !strings.Contains(line, "--no-install-recommends") || !strings.Contains(line, "--no-upgrade") {
			t.Errorf("%s: an install without --no-install-recommends and --no-upgrade: %s", script, strings.TrimSpace(line))
		}
		if strings.Contains(line, "apt-get -s ") {
			simulate = true
		} else {
			install = true
		}
	}
	if !simulate || !install {
		t.Errorf("%s does not simulate (apt-get -s) and then install: simulate %v, install %v", script, simulate, install)
	}
}
