package acemq_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"
)

// TestOutboxDocsAgreeWhereTablesAreCreated holds outbox.Module's doc
// comment and docs/outbox.md's "With fx" section to one account of where
// the tables are created (issue 39 found them disagreeing): the module
// creates nothing, and the app creates them with Schema.Create in a start
// hook of its *sql.DB's provider (which runs before the module's check,
// the module asking for the *sql.DB) or takes Schema.SQL into its
// migrations. An fx.Invoke is no place for it: it has no start context.
func TestOutboxDocsAgreeWhereTablesAreCreated(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "outbox/fx.go", nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	var module string
	for _, d := range f.Decls {
		if fd, ok := d.(*ast.FuncDecl); ok && fd.Name.Name == "Module" && fd.Recv == nil && fd.Doc != nil {
			module = fd.Doc.Text()
		}
	}
	if module == "" {
		t.Fatal("outbox/fx.go has no documented func Module")
	}
	md, err := os.ReadFile("docs/outbox.md")
	if err != nil {
		t.Fatal(err)
	}
	section := string(md)
	if i := strings.Index(section, "\n## With fx"); i >= 0 {
		section = section[i+1:]
		if j := strings.Index(section[3:], "\n## "); j >= 0 {
			section = section[:j+3]
		}
	} else {
		t.Fatal(`docs/outbox.md has no "## With fx" section`)
	}
	for name, text := range map[string]string{"outbox.Module's doc": module, `docs/outbox.md "With fx"`: section} {
		flat := strings.ReplaceAll(strings.Join(strings.Fields(text), " "), "`", "")
		for _, says := range []string{"creates nothing", "Schema.Create", "*sql.DB's provider", "Schema.SQL"} {
			if !strings.Contains(flat, says) {
				t.Errorf("%s does not say %q about where the tables are created", name, says)
			}
		}
		if strings.Contains(flat, "fx.Invoke") {
			t.Errorf("%s says to create the tables in an fx.Invoke; the account is a start hook of the *sql.DB's provider", name)
		}
	}
}
