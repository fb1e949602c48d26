package testenv

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// Record is one log record as a LogRecorder kept it: its attributes (those
// added with Logger.With included) flattened to strings.
type Record struct {
	Time  time.Time
	Level slog.Level
	Msg   string
	Attrs map[string]string
}

// String is the record's level, message and attributes (sorted by key),
// for failure messages.
func (r Record) String() string {
	keys := make([]string, 0, len(r.Attrs))
	for k := range r.Attrs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", r.Level, r.Msg)
	for _, k := range keys {
		fmt.Fprintf(&b, " %s=%q", k, r.Attrs[k])
	}
	return b.String()
}

// LogRecorder is a slog.Handler that keeps every record, at every level, so
// a test can assert on the library's events, and passes the records at
// Info and above to the test log (as Logger does), except those whose
// message is one of its quiet ones. WithGroup is ignored: attributes added
// after it are kept under their own keys.
type LogRecorder struct {
	store *logStore
	pre   []slog.Attr
	out   slog.Handler
}

type logStore struct {
	mu      sync.Mutex
	records []Record
	byMsg   map[string][]Record // the same records by message: All(msg) need not scan them all
	quiet   map[string]bool
}

// NewLogRecorder returns a LogRecorder that echoes to t's log. Records
// whose message is one of quiet (per-message events, say) are kept but not
// echoed.
func NewLogRecorder(t testing.TB, quiet ...string) *LogRecorder {
	s := &logStore{byMsg: map[string][]Record{}, quiet: make(map[string]bool, len(quiet))}
	for _, m := range quiet {
		s.quiet[m] = true
	}
	return &LogRecorder{store: s, out: Logger(t).Handler()}
}

// Logger returns a logger writing to h.
func (h *LogRecorder) Logger() *slog.Logger { return slog.New(h) }

// Enabled implements slog.Handler: every level is kept.
func (h *LogRecorder) Enabled(context.Context, slog.Level) bool { return true }

// Handle implements slog.Handler.
func (h *LogRecorder) Handle(ctx context.Context, r slog.Record) error {
	rec := Record{Time: r.Time, Level: r.Level, Msg: r.Message, Attrs: map[string]string{}}
	for _, a := range h.pre {
		rec.Attrs[a.Key] = a.Value.String()
	}
	r.Attrs(func(a slog.Attr) bool {
		rec.Attrs[a.Key] = a.Value.String()
		return true
	})
	h.store.mu.Lock()
	h.store.records = append(h.store.records, rec)
	h.store.byMsg[rec.Msg] = append(h.store.byMsg[rec.Msg], rec)
	quiet := h.store.quiet[rec.Msg]
	h.store.mu.Unlock()
	if !quiet && r.Level >= slog.LevelInfo {
		return h.out.Handle(ctx, r)
	}
	return nil
}

// WithAttrs implements slog.Handler.
func (h *LogRecorder) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.pre = append(slices.Clone(h.pre), as...)
	c.out = h.out.WithAttrs(as)
	return &c
}

// WithGroup implements slog.Handler; the group is ignored.
func (h *LogRecorder) WithGroup(string) slog.Handler { return h }

// All returns the records whose message is msg ("" for every record), in
// the order they were logged.
func (h *LogRecorder) All(msg string) []Record {
	h.store.mu.Lock()
	defer h.store.mu.Unlock()
	if msg == "" {
		return slices.Clone(h.store.records)
	}
	return slices.Clone(h.store.byMsg[msg])
}

// Count is how many records have the message msg ("" for every record).
func (h *LogRecorder) Count(msg string) int {
	h.store.mu.Lock()
	defer h.store.mu.Unlock()
	if msg == "" {
		return len(h.store.records)
	}
	return len(h.store.byMsg[msg])
}

// Containing returns the records whose message or any attribute value
// contains s.
func (h *LogRecorder) Containing(s string) []Record {
	var out []Record
	for _, r := range h.All("") {
		hit := strings.Contains(r.Msg, s)
		for _, v := range r.Attrs {
			hit = hit || strings.Contains(v, s)
		}
		if hit {
			out = append(out, r)
		}
	}
	return out
}

// Events is how many records of each message were logged, "msg=n ...",
// sorted by message: a one-line summary for a test's report.
func (h *LogRecorder) Events() string {
	h.store.mu.Lock()
	defer h.store.mu.Unlock()
	keys := make([]string, 0, len(h.store.byMsg))
	for k := range h.store.byMsg {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%d", k, len(h.store.byMsg[k])))
	}
	return strings.Join(parts, " ")
}
