package acemq_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// acemqWord is "acemq" followed by a word, in prose or a code block: a
// command the docs tell the reader to run (`acemq replay`, `go run
// ./cmd/acemq peek`).
var acemqWord = regexp.MustCompile(`\bacemq ([a-z][a-z-]*)`)

// TestDocsNameOnlyCommandsTheCLIHas holds README.md and docs/*.md to the
// commands cmd/acemq has (read from its cli struct, as kong reads them): a
// reader told to run a command that does not exist (issue 39 found
// `acemq declare`) is stuck.
func TestDocsNameOnlyCommandsTheCLIHas(t *testing.T) {
	commands := cliCommands(t)
	files, err := globDocs()
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range files {
		text, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(text), "\n") {
			for _, m := range acemqWord.FindAllStringSubmatch(line, -1) {
				// "the acemq command" is the program's name in prose.
				if w := m[1]; w != "command" && !commands[w] {
					t.Errorf("%s:%d names `acemq %s`, which cmd/acemq does not have (it has %v)", path, i+1, w, keys(commands))
				}
			}
		}
	}
}

// cliCommands is the commands of cmd/acemq: the fields of its cli struct
// tagged cmd, by their name tag or, as kong names them, their field name
// in kebab case.
func cliCommands(t *testing.T) map[string]bool {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "cmd/acemq/cli.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	var st *ast.StructType
	if o := f.Scope.Lookup("cli"); o != nil {
		if ts, ok := o.Decl.(*ast.TypeSpec); ok {
			st, _ = ts.Type.(*ast.StructType)
		}
	}
	if st == nil {
		t.Fatal("cmd/acemq/cli.go has no struct type cli")
	}
	for _, fl := range st.Fields.List {
		if fl.Tag == nil || len(fl.Names) == 0 {
			continue
		}
		raw, err := strconv.Unquote(fl.Tag.Value)
		if err != nil {
			t.Fatal(err)
		}
		tag := reflect.StructTag(raw)
		if _, isCmd := tag.Lookup("cmd"); !isCmd {
			continue
		}
		name := tag.Get("name")
		if name == "" {
			name = kebab(fl.Names[0].Name)
		}
		out[name] = true
	}
	if len(out) < 3 {
		t.Fatalf("found %d commands in cmd/acemq/cli.go: the cli struct is not read right", len(out))
	}
	return out
}

func kebab(s string) string {
	var b strings.Builder
	for i, r := range s {
		if unicode.IsUpper(r) {
			if i > 0 {
				b.WriteByte('-')
			}
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
