package acemq_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Issue 29, docs that do not match: a snippet needs the imports a reader
// cannot guess, what `make test` installs is said with the same numbers in
// the Makefile and the README, and the README's attempts claim is exactly
// what docs/reliability.md says.

// guessless maps what a snippet uses to the import it needs, for imports a
// reader cannot guess from the name: a package nested under another, and a
// database/sql driver registered by a blank import (without it the service
// builds, then fails at start with `sql: unknown driver "pgx"`).
var guessless = []struct{ uses, needs string }{
	{"fxmoduletest.", `"github.com/acemq/acemq-go/fxmodule/fxmoduletest"`},
	{`sql.Open("pgx"`, `_ "github.com/jackc/pgx/v5/stdlib"`},
}

func TestDocsSnippetsShowGuesslessImports(t *testing.T) {
	files, err := globDocs()
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range files {
		code := ""
		for _, b := range snippets(t, path) {
			code += strings.Join(b, "\n") + "\n"
		}
		for _, g := range guessless {
			if strings.Contains(code, g.uses) && !strings.Contains(code, g.needs) {
				t.Errorf("%s: a Go snippet uses %s but no snippet imports %s", path, g.uses, g.needs)
			}
		}
	}
}

func globDocs() ([]string, error) {
	docs, err := filepath.Glob("docs/*.md")
	return append([]string{"README.md"}, docs...), err
}

var chromiumSize = regexp.MustCompile(`chromium[^\n]*?(\d+) packages[^\n]*?(\d+) MB download[^\n]*?(\d+) MB`)

// The Makefile installs chromium when missing (for the console's browser
// tests); its message and the README say the same numbers.
func TestREADMESaysWhatMakeTestInstalls(t *testing.T) {
	mk, err := os.ReadFile("Makefile")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	m := chromiumSize.FindStringSubmatch(string(mk))
	if m == nil {
		t.Fatalf("the Makefile's chromium message does not say how many packages and MB it installs (want %q)", chromiumSize)
	}
	r := chromiumSize.FindStringSubmatch(string(readme))
	if r == nil {
		t.Fatalf("the README does not say that make test installs chromium, with its packages and MB (want %q)", chromiumSize)
	}
	if strings.Join(m[1:], " ") != strings.Join(r[1:], " ") {
		t.Errorf("Makefile says %v packages/MB download/MB disk, README %v", m[1:], r[1:])
	}
}

// The README's attempts claim: a crash during an in-process wait forgets
// the in-process attempts (docs/reliability.md); the README must not say a
// message never forgets them across restarts, and must say what a crash
// forgets.
func TestREADMEAttemptsClaimIsExact(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Join(strings.Fields(string(readme)), " ")
	if regexp.MustCompile(`never forgets the attempts it used[^.]*restarts`).MatchString(text) {
		t.Errorf("the README says a message never forgets its attempts across restarts; a kill -9 during an in-process wait forgets them (docs/reliability.md)")
	}
	if !strings.Contains(text, "kill -9") || !strings.Contains(text, "forgets the in-process attempts") {
		t.Errorf("the README does not say what a crash (kill -9) during an in-process wait forgets")
	}
}

// readmeMaxLines is the most lines the README may have: a landing page,
// the detail in docs/ (issue 39 found it grown to 512 lines again).
const readmeMaxLines = 450

func TestREADMEIsALandingPage(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(readme), "\n"); n > readmeMaxLines {
		t.Errorf("README.md has %d lines, over %d: move the detail to docs/ and link to it", n, readmeMaxLines)
	}
}
