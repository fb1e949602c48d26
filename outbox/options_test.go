package outbox_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// compile type-checks one package per body (the statements of a function
// with db *sql.DB and b *mq.Broker in scope) inside this module, in one go
// build, and returns go build's output for each body that did not compile.
func compile(t *testing.T, bodies map[string]string) map[string]string {
	t.Helper()
	dirs := map[string]string{}
	args := []string{"build"}
	for name, body := range bodies {
		dir, err := os.MkdirTemp(".", "optcheck")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.RemoveAll(dir) })
		src := `package optcheck

import (
	"database/sql"
	"log/slog"
	"time"

	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/outbox"
)

var (
	_ = slog.Default
	_ = time.Second
)

func f(db *sql.DB, b *mq.Broker) {
	` + body + `
}
`
		if err := os.WriteFile(filepath.Join(dir, "f.go"), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		dir = filepath.Base(dir)
		dirs[dir] = name
		args = append(args, "./"+dir)
	}
	out, _ := exec.Command("go", args...).CombinedOutput()
	failed := map[string]string{}
	// go build heads each failing package's errors with "# <import path>".
	for _, sec := range strings.Split("\n"+string(out), "\n# ")[1:] {
		head, rest, _ := strings.Cut(sec, "\n")
		name, ok := dirs[filepath.Base(head)]
		if !ok {
			t.Fatalf("go build: %s", out)
		}
		failed[name] = rest
	}
	return failed
}

// Each constructor takes its own options: an option given to a
// constructor it does not apply to is a compile error, not an option
// silently ignored; WithSchema is taken by all three, and Module takes
// every option.
func TestMisplacedOptionsDoNotCompile(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go build")
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Fatalf("go build is needed: %v", err)
	}
	misplaced := map[string]string{
		"KeyBy to New":                  `_ = outbox.New(outbox.KeyBy(nil))`,
		"Retention to NewRelay":         `_ = outbox.NewRelay(db, b, outbox.Retention(time.Hour))`,
		"BatchSize to Inbox":            `_ = outbox.Inbox(db, outbox.BatchSize(10))`,
		"OrderBy to NewRelay":           `_ = outbox.NewRelay(db, b, outbox.OrderBy(nil))`,
		"WithNotify to Inbox":           `_ = outbox.Inbox(db, outbox.WithNotify())`,
		"WithPropagators to Inbox":      `_ = outbox.Inbox(db, outbox.WithPropagators(nil))`,
		"PublishTimeout to New":         `_ = outbox.New(outbox.PublishTimeout(time.Second))`,
		"WithMeterProvider to New":      `_ = outbox.New(outbox.WithMeterProvider(nil))`,
		"WithPublisherOptions to Inbox": `_ = outbox.Inbox(db, outbox.WithPublisherOptions(mq.AllowUnroutable()))`,
	}
	placed := `s := outbox.Schema{}
	_ = outbox.New(outbox.WithSchema(s), outbox.OrderBy(nil), outbox.WithNotify(), outbox.WithoutNotify(), outbox.WithPropagators(nil))
	_ = outbox.NewRelay(db, b, outbox.WithSchema(s), outbox.WithMeterProvider(nil), outbox.WithPropagators(nil),
		outbox.PollInterval(time.Second), outbox.BatchSize(1), outbox.MaxAttempts(1), outbox.PublishTimeout(time.Second), outbox.WithPublisherOptions())
	_ = outbox.Inbox(db, outbox.WithSchema(s), outbox.WithMeterProvider(nil), outbox.KeyBy(nil), outbox.Retention(time.Hour))
	_ = outbox.Module(outbox.WithSchema(s), outbox.OrderBy(nil), outbox.WithNotify(), outbox.WithPropagators(nil),
		outbox.WithMeterProvider(nil), outbox.PollInterval(time.Second), outbox.BatchSize(1), outbox.MaxAttempts(1), outbox.PublishTimeout(time.Second),
		outbox.WithPublisherOptions(), outbox.KeyBy(nil), outbox.Retention(time.Hour))
	var _ []outbox.Option = []outbox.Option{outbox.WithSchema(s), outbox.KeyBy(nil), outbox.BatchSize(1), outbox.OrderBy(nil)}`
	all := map[string]string{"placed": placed}
	for name, call := range misplaced {
		all[name] = call
	}
	failed := compile(t, all)
	if out, ok := failed["placed"]; ok {
		t.Errorf("options where they apply do not compile:\n%s", out)
	}
	for name, call := range misplaced {
		out, ok := failed[name]
		switch {
		case !ok:
			t.Errorf("%s: %s compiled: the option is silently ignored", name, call)
		case !strings.Contains(out, "cannot use"):
			t.Errorf("%s: go build failed, but not on the option: %s", name, out)
		}
	}
}
