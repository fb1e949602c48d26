package mq_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// TestLoggerSetOnePlace holds mq to one way of giving it a logger:
// Config.Logger, the Broker's logger, which its consumers, publishers and
// the middleware they run inherit (Broker.Logger, Delivery.Logger). No
// exported function or method of mq takes a *slog.Logger: an option such
// as a WithLogger would be a second way, with an order to learn between
// the two.
func TestLoggerSetOnePlace(t *testing.T) {
	fset := token.NewFileSet()
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var takers []string
	config := false
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if !d.Name.IsExported() {
					continue
				}
				for _, p := range d.Type.Params.List {
					if isSlogLogger(p.Type) {
						takers = append(takers, fset.Position(d.Pos()).String()+" "+d.Name.Name)
					}
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					ts, ok := s.(*ast.TypeSpec)
					if !ok || ts.Name.Name != "Config" {
						continue
					}
					for _, fl := range ts.Type.(*ast.StructType).Fields.List {
						for _, n := range fl.Names {
							if n.Name == "Logger" && isSlogLogger(fl.Type) {
								config = true
							}
						}
					}
				}
			}
		}
	}
	if len(takers) > 0 {
		t.Errorf("a logger is given to mq other than by Config.Logger: %s", strings.Join(takers, "; "))
	}
	if !config {
		t.Error("Config has no Logger *slog.Logger field: the one way to give mq a logger is gone")
	}
}

func isSlogLogger(e ast.Expr) bool {
	st, ok := e.(*ast.StarExpr)
	if !ok {
		return false
	}
	sel, ok := st.X.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	id, ok := sel.X.(*ast.Ident)
	return ok && id.Name == "slog" && sel.Sel.Name == "Logger"
}
