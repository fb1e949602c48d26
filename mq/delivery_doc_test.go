package mq_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDeliveryFieldsAreDiscoverable holds mq.Delivery to fields of its
// own, each documented, so `go doc mq.Delivery` lists what a handler reads
// rather than "has unexported fields" hiding them behind an embedded
// struct; and to no Acknowledger: settling goes through the library.
func TestDeliveryFieldsAreDiscoverable(t *testing.T) {
	fset := token.NewFileSet()
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, n := range names {
		if strings.HasSuffix(n, "_test.go") {
			continue
		}
		src, err := os.ReadFile(n)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, n, src, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	// Read the struct as written (go/doc would drop the embedded
	// unexported struct, as go doc does, hiding its promoted fields).
	var st *ast.StructType
	for _, f := range files {
		if o := f.Scope.Lookup("Delivery"); o != nil {
			if ts, ok := o.Decl.(*ast.TypeSpec); ok {
				st, _ = ts.Type.(*ast.StructType)
			}
		}
	}
	if st == nil {
		t.Fatal("no struct type mq.Delivery")
	}
	fields := map[string]*ast.Field{}
	for _, f := range st.Fields.List {
		if len(f.Names) == 0 {
			t.Errorf("mq.Delivery embeds %v: go doc shows its fields only as \"has unexported fields\"", f.Type)
			continue
		}
		for _, n := range f.Names {
			fields[n.Name] = f
		}
	}
	for _, want := range []string{"MessageId", "Body", "Headers", "ContentType", "ContentEncoding",
		"CorrelationId", "ReplyTo", "Type", "AppId", "UserId", "Timestamp", "Expiration",
		"Priority", "DeliveryMode", "Exchange", "RoutingKey", "Redelivered"} {
		f, ok := fields[want]
		if !ok {
			t.Errorf("go doc mq.Delivery does not list %s", want)
			continue
		}
		if f.Doc == nil && f.Comment == nil {
			t.Errorf("mq.Delivery.%s has no doc comment", want)
		}
	}
	if _, ok := fields["Acknowledger"]; ok {
		t.Error("mq.Delivery exports an Acknowledger: settling belongs to the library")
	}
}
