package outbox

import (
	"os"
	"strings"
	"testing"
)

// Every Go snippet of docs/outbox.md is in example_test.go verbatim (lines
// trimmed), so the page's code compiles as written.
func TestDocsAreMirrored(t *testing.T) {
	doc, err := os.ReadFile("../docs/outbox.md")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	here := trimmed(string(src))
	var blocks [][]string
	var cur []string
	in := false
	for _, l := range strings.Split(string(doc), "\n") {
		switch {
		case !in && strings.TrimSpace(l) == "```go":
			in, cur = true, nil
		case in && strings.TrimSpace(l) == "```":
			in = false
			blocks = append(blocks, trimmed(strings.Join(cur, "\n")))
		case in:
			cur = append(cur, l)
		}
	}
	if len(blocks) < 4 {
		t.Fatalf("found %d Go snippets in docs/outbox.md, want at least 4", len(blocks))
	}
	for i, b := range blocks {
		if !hasRun(here, b) {
			t.Errorf("docs/outbox.md Go snippet %d (starting %q) is not in example_test.go verbatim", i+1, b[0])
		}
	}
}

func trimmed(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

func hasRun(hay, needle []string) bool {
	for i := 0; i+len(needle) <= len(hay); i++ {
		ok := true
		for j := range needle {
			if hay[i+j] != needle[j] {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}
