package mq_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// apiBudget is the most names mq may export: its top-level names plus the
// methods of its exported types, in non-test files (issue 39). A name
// earns its place by a user outside mq; adding one means taking one out,
// or raising this number in a commit that says why.
const apiBudget = 130

func TestExportedNamesWithinBudget(t *testing.T) {
	names := exportedNames(t, ".")
	if len(names) > apiBudget {
		t.Errorf("mq exports %d names, at most %d:\n%s", len(names), apiBudget, strings.Join(names, "\n"))
	}
}

// exportedNames lists dir's exported top-level names and the exported
// methods of its exported types, as "Name" and "Type.Method".
func exportedNames(t *testing.T, dir string) []string {
	t.Helper()
	fset := token.NewFileSet()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, e := range entries {
		if name := e.Name(); !e.IsDir() && strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, "_test.go") {
			f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			files = append(files, f)
		}
	}
	types := map[string]bool{}
	var names []string
	var methods []*ast.FuncDecl
	for _, f := range files {
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						if s.Name.IsExported() {
							types[s.Name.Name] = true
							names = append(names, s.Name.Name)
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if n.IsExported() {
								names = append(names, n.Name)
							}
						}
					}
				}
			case *ast.FuncDecl:
				switch {
				case !d.Name.IsExported():
				case d.Recv == nil:
					names = append(names, d.Name.Name)
				default:
					methods = append(methods, d)
				}
			}
		}
	}
	for _, m := range methods {
		recv := m.Recv.List[0].Type
		if star, ok := recv.(*ast.StarExpr); ok {
			recv = star.X
		}
		if id, ok := recv.(*ast.Ident); ok && types[id.Name] {
			names = append(names, id.Name+"."+m.Name.Name)
		}
	}
	sort.Strings(names)
	return names
}

// The count is the one issue 39 gives: a name the list misses or counts
// twice would let the budget drift.
func TestExportedNamesCountsMethodsOfExportedTypesOnly(t *testing.T) {
	dir := t.TempDir()
	src := `package p
type T struct{}
type u struct{}
func (T) M()  {}
func (*T) N() {}
func (T) m()  {}
func (u) M()  {}
func F()      {}
const C, d = 1, 2
var V int
`
	if err := os.WriteFile(dir+"/p.go", []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir+"/p_test.go", []byte("package p\nfunc G() {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(exportedNames(t, dir), " ")
	if want := "C F T T.M T.N V"; got != want {
		t.Errorf("exportedNames = %q, want %q", got, want)
	}
}
