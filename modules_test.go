package acemq_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// heavyModules are the modules a service that imports only the core must
// not find in its build list: the console's browser tests (chromedp), the
// CLI's (kong, progressbar) and the outbox's (pgx).
var heavyModules = []string{
	"github.com/chromedp/",
	"github.com/alecthomas/kong",
	"github.com/schollz/progressbar",
	"github.com/jackc/pgx",
}

// heavyIn returns the modules of mods that heavyModules names.
func heavyIn(mods []string) []string {
	var found []string
	for _, m := range mods {
		for _, heavy := range heavyModules {
			if strings.HasPrefix(m, heavy) {
				found = append(found, m)
			}
		}
	}
	return found
}

// goCmd runs the go command in dir with the module settings of a user's
// module outside this checkout: no workspace, go.mod updated as needed.
func goCmd(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go %s in %s: %v\n%s", strings.Join(args, " "), dir, err, out)
	}
	return string(out)
}

// consumerModule writes a module of a user's in a temporary directory:
// go.mod (requires, each replaced by this checkout's directory, since
// nothing here is published) and main.go importing imports.
func consumerModule(t *testing.T, replaces map[string]string, imports []string) string {
	t.Helper()
	dir := t.TempDir()
	var mod strings.Builder
	mod.WriteString("module example.com/consumer\n\ngo 1.26.0\n")
	for path, local := range replaces {
		mod.WriteString("\nrequire " + path + " v0.0.0-00010101000000-000000000000\n")
		mod.WriteString("replace " + path + " => " + local + "\n")
	}
	var src strings.Builder
	src.WriteString("package main\n\nimport (\n")
	for _, imp := range imports {
		src.WriteString("\t_ \"" + imp + "\"\n")
	}
	src.WriteString(")\n\nfunc main() {}\n")
	for name, text := range map[string]string{"go.mod": mod.String(), "main.go": src.String()} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// buildList tidies dir's module, builds it and returns `go list -m all`.
func buildList(t *testing.T, dir string) []string {
	t.Helper()
	goCmd(t, dir, "mod", "tidy")
	goCmd(t, dir, "build", "-o", os.DevNull, ".")
	return strings.Fields(goCmd(t, dir, "list", "-m", "-f", "{{.Path}}", "all"))
}

func checkoutRoot(t *testing.T) string {
	t.Helper()
	root, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// A service that imports only the core (mq, topology, middleware, retry)
// must not get the CLI's, the outbox's or the browser tests' modules in
// its build list: those live in modules of their own.
func TestCoreBuildListIsLean(t *testing.T) {
	start := time.Now()
	root := checkoutRoot(t)
	dir := consumerModule(t,
		map[string]string{"github.com/acemq/acemq-go": root},
		[]string{
			"github.com/acemq/acemq-go/mq",
			"github.com/acemq/acemq-go/topology",
			"github.com/acemq/acemq-go/middleware",
			"github.com/acemq/acemq-go/retry",
		})
	mods := buildList(t, dir)
	t.Logf("a module importing mq, topology, middleware and retry: %d modules in `go list -m all` (%s)", len(mods), time.Since(start).Round(time.Millisecond))
	if heavy := heavyIn(mods); len(heavy) > 0 {
		t.Errorf("build list of a core-only module holds %s; all %d:\n%s", strings.Join(heavy, ", "), len(mods), strings.Join(mods, "\n"))
	}
}

// The outbox is a module of its own under its old import path: a service
// that requires it (and the core) builds, gets pgx through it, and still
// none of the CLI's or the browser tests' modules.
func TestOutboxModuleBuildsOnItsOwn(t *testing.T) {
	root := checkoutRoot(t)
	dir := consumerModule(t,
		map[string]string{
			"github.com/acemq/acemq-go":        root,
			"github.com/acemq/acemq-go/outbox": filepath.Join(root, "outbox"),
		},
		[]string{
			"github.com/acemq/acemq-go/mq",
			"github.com/acemq/acemq-go/outbox",
		})
	mods := buildList(t, dir)
	t.Logf("a module importing mq and outbox: %d modules in `go list -m all`", len(mods))
	var pgx bool
	for _, m := range mods {
		pgx = pgx || m == "github.com/jackc/pgx/v5"
	}
	if !pgx {
		t.Errorf("build list of an outbox user lacks github.com/jackc/pgx/v5:\n%s", strings.Join(mods, "\n"))
	}
	for _, m := range heavyIn(mods) {
		if !strings.HasPrefix(m, "github.com/jackc/pgx") {
			t.Errorf("build list of an outbox user holds %s:\n%s", m, strings.Join(mods, "\n"))
		}
	}
}

// `go install github.com/acemq/acemq-go/cmd/acemq@latest` refuses a module
// whose go.mod has a replace (or exclude) directive, and a user's `go get`
// of the outbox ignores one: the published modules have none, go.work
// stands in for them in development (scripts/modules.sh check proves the
// install from a local release).
func TestPublishedModulesHaveNoReplace(t *testing.T) {
	root := checkoutRoot(t)
	for _, dir := range []string{"outbox", "cmd/acemq"} {
		cmd := exec.Command("go", "mod", "edit", "-json")
		cmd.Dir = filepath.Join(root, dir)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go mod edit -json in %s: %v", dir, err)
		}
		var mod struct {
			Replace, Exclude []json.RawMessage
		}
		if err := json.Unmarshal(out, &mod); err != nil {
			t.Fatalf("go mod edit -json in %s: %v", dir, err)
		}
		if len(mod.Replace)+len(mod.Exclude) > 0 {
			t.Errorf("%s/go.mod has replace or exclude directives; go install …@latest would refuse it:\n%s", dir, out)
		}
	}
}

// In the workspace (go.work) a package of the core builds even when it
// imports a module that only a nested module requires (pgx through the
// outbox): the core's go.mod must stand on its own, as a user's build
// sees it, so it is tidy without the workspace.
func TestCoreGoModIsTidyWithoutWorkspace(t *testing.T) {
	cmd := exec.Command("go", "mod", "tidy", "-diff")
	cmd.Dir = checkoutRoot(t)
	cmd.Env = append(os.Environ(), "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("go mod tidy -diff (GOWORK=off) in the root: %v; the core's go.mod or go.sum is not what its packages need (scripts/modules.sh tidy):\n%s", err, out)
	}
}
