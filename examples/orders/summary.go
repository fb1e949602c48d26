package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// spanLog keeps every finished span in memory, to print each order's trace
// as one readable line at the end. A real service exports to a collector.
type spanLog struct {
	mu    sync.Mutex
	spans []sdktrace.ReadOnlySpan
}

func (s *spanLog) ExportSpans(_ context.Context, spans []sdktrace.ReadOnlySpan) error {
	s.mu.Lock()
	s.spans = append(s.spans, spans...)
	s.mu.Unlock()
	return nil
}

func (s *spanLog) Shutdown(context.Context) error { return nil }

// print writes one block per trace: its spans as a tree, each under its
// parent and siblings in the order they started, failures marked ✗.
func (s *spanLog) print(w io.Writer) {
	s.mu.Lock()
	spans := slices.Clone(s.spans)
	s.mu.Unlock()
	byTrace := map[trace.TraceID][]sdktrace.ReadOnlySpan{}
	var order []trace.TraceID
	for _, sp := range spans {
		id := sp.SpanContext().TraceID()
		if _, seen := byTrace[id]; !seen {
			order = append(order, id)
		}
		byTrace[id] = append(byTrace[id], sp)
	}
	sort.Slice(order, func(i, j int) bool { return first(byTrace[order[i]]) < first(byTrace[order[j]]) })
	for _, id := range order {
		fmt.Fprintf(w, "trace %s\n", id.String()[:12])
		printTree(w, byTrace[id])
	}
}

// printTree prints a trace's spans as a tree: each span under its parent,
// siblings in the order they started. A span whose parent is not in the
// trace (not exported, or from another process) is a root.
func printTree(w io.Writer, ss []sdktrace.ReadOnlySpan) {
	present := map[trace.SpanID]bool{}
	for _, sp := range ss {
		present[sp.SpanContext().SpanID()] = true
	}
	children := map[trace.SpanID][]sdktrace.ReadOnlySpan{}
	var roots []sdktrace.ReadOnlySpan
	for _, sp := range ss {
		if p := sp.Parent(); p.IsValid() && present[p.SpanID()] && p.SpanID() != sp.SpanContext().SpanID() {
			children[p.SpanID()] = append(children[p.SpanID()], sp)
			continue
		}
		roots = append(roots, sp)
	}
	byStart := func(list []sdktrace.ReadOnlySpan) {
		sort.SliceStable(list, func(i, j int) bool { return list[i].StartTime().Before(list[j].StartTime()) })
	}
	printed := map[trace.SpanID]bool{}
	var walk func(sp sdktrace.ReadOnlySpan, d int)
	walk = func(sp sdktrace.ReadOnlySpan, d int) {
		id := sp.SpanContext().SpanID()
		if printed[id] {
			return // a cycle in broken data: print each span once
		}
		printed[id] = true
		mark := ""
		if sp.Status().Code == codes.Error {
			mark = "  ✗ " + sp.Status().Description
		}
		fmt.Fprintf(w, "  %s%s%s%s\n", strings.Repeat("  ", d), sp.Name(), attrs(sp), mark)
		for _, ev := range sp.Events() {
			fmt.Fprintf(w, "  %s  · %s%s\n", strings.Repeat("  ", d), ev.Name, eventAttrs(ev.Attributes))
		}
		kids := children[id]
		byStart(kids)
		for _, c := range kids {
			walk(c, d+1)
		}
	}
	byStart(roots)
	for _, r := range roots {
		walk(r, 0)
	}
}

func first(ss []sdktrace.ReadOnlySpan) int64 {
	m := int64(1<<63 - 1)
	for _, s := range ss {
		m = min(m, s.StartTime().UnixNano())
	}
	return m
}

// attrs picks the acemq.* attributes worth reading.
func attrs(sp sdktrace.ReadOnlySpan) string {
	var parts []string
	for _, kv := range sp.Attributes() {
		switch kv.Key {
		case "acemq.attempt", "acemq.outcome", "acemq.hop":
			parts = append(parts, fmt.Sprintf("%s=%s", strings.TrimPrefix(string(kv.Key), "acemq."), kv.Value.String()))
		case "messaging.message.conversation_id":
			parts = append(parts, "order="+kv.Value.String())
		}
	}
	if len(parts) == 0 {
		return ""
	}
	sort.Strings(parts)
	return " [" + strings.Join(parts, " ") + "]"
}

// printOutcomes prints the acemq.message.outcomes counter by queue and
// outcome.
func printOutcomes(w io.Writer, r *sdkmetric.ManualReader) {
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		fmt.Fprintln(w, "metrics:", err)
		return
	}
	var lines []string
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "acemq.message.outcomes" {
				continue
			}
			sum, ok := m.Data.(metricdata.Sum[int64])
			if !ok {
				continue
			}
			for _, dp := range sum.DataPoints {
				q, _ := dp.Attributes.Value("messaging.destination.name")
				o, _ := dp.Attributes.Value("acemq.outcome")
				lines = append(lines, fmt.Sprintf("  %-16s %-12s %d", q.String(), o.String(), dp.Value))
			}
		}
	}
	sort.Strings(lines)
	for _, l := range lines {
		fmt.Fprintln(w, l)
	}
}

// eventAttrs picks what is worth reading on a span event: which attempt,
// how the retry waits, and why it failed.
func eventAttrs(kvs []attribute.KeyValue) string {
	var parts []string
	for _, kv := range kvs {
		switch kv.Key {
		case "acemq.attempt", "acemq.retry.kind", "acemq.retry.wait_ms":
			parts = append(parts, fmt.Sprintf("%s=%s", strings.TrimPrefix(string(kv.Key), "acemq."), kv.Value.String()))
		case "exception.message", "error.message":
			parts = append(parts, fmt.Sprintf("%q", kv.Value.String()))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return " [" + strings.Join(parts, " ") + "]"
}
