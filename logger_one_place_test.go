package acemq_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestLoggerOnePlaceAcrossModules holds middleware, outbox and mqtest to
// mq's one way of giving a logger (mq.Config.Logger, which reaches a
// consumer's deliveries as Delivery.Logger and a relay through its
// Broker): none of them has an exported function, method or struct field
// taking a *slog.Logger, but for the fake's one way, mqtest.Logger (the
// test delivery's runtime, standing where a consumer hands its logger to
// its deliveries).
func TestLoggerOnePlaceAcrossModules(t *testing.T) {
	allowed := []string{"mqtest.Logger"}
	var found []string
	for _, dir := range []string{"middleware", "outbox", "mqtest"} {
		names, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil || len(names) == 0 {
			t.Fatalf("no Go files in %s: %v", dir, err)
		}
		fset := token.NewFileSet()
		for _, name := range names {
			if strings.HasSuffix(name, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, name, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range loggerTakers(f) {
				found = append(found, dir+"."+n)
			}
		}
	}
	var extra []string
	for _, n := range found {
		if !slices.Contains(allowed, n) {
			extra = append(extra, n)
		}
	}
	if len(extra) > 0 {
		t.Errorf("a second way to give a logger (mq.Config.Logger is the one): %s", strings.Join(extra, ", "))
	}
	for _, n := range allowed {
		if !slices.Contains(found, n) {
			t.Errorf("%s, the fake's one way to set a delivery's logger, is gone", n)
		}
	}
}

// loggerTakers is the exported functions and methods of f with a
// *slog.Logger parameter, and the exported fields of exported struct types
// of type *slog.Logger (as Type.Field).
func loggerTakers(f *ast.File) []string {
	var out []string
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if !d.Name.IsExported() {
				continue
			}
			for _, p := range d.Type.Params.List {
				if isSlogLogger(p.Type) {
					out = append(out, d.Name.Name)
				}
			}
		case *ast.GenDecl:
			for _, s := range d.Specs {
				ts, ok := s.(*ast.TypeSpec)
				if !ok || !ts.Name.IsExported() {
					continue
				}
				st, ok := ts.Type.(*ast.StructType)
				if !ok {
					continue
				}
				for _, fl := range st.Fields.List {
					if !isSlogLogger(fl.Type) {
						continue
					}
					for _, n := range fl.Names {
						if n.IsExported() {
							out = append(out, ts.Name.Name+"."+n.Name)
						}
					}
				}
			}
		}
	}
	return out
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
