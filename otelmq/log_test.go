package otelmq_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/trace"

	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/otelmq"
)

func records(t *testing.T, buf *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

// A record written inside a handler carries the process span's ids.
func TestLogInsideAHandlerCarriesTheSpan(t *testing.T) {
	r := newRig(t)
	var buf bytes.Buffer
	log := slog.New(otelmq.LogHandler(slog.NewJSONHandler(&buf, nil))).With("service", "shipping")
	var sc trace.SpanContext
	r.queues["orders"] = []mq.Message{{MessageId: "m1", Body: []byte("secret body"), Headers: amqp.Table{}}}
	r.deliver(r.next("orders"), func(ctx context.Context, d *mq.Delivery) error {
		sc = trace.SpanContextFromContext(ctx)
		log.InfoContext(ctx, "handling", "message_id", d.MessageId)
		log.Info("no context")
		return nil
	}, 0, "", "")

	process := one(t, r.spans.Ended(), "process orders")
	if !sc.Equal(process.SpanContext()) {
		t.Fatalf("the handler's context carries %v, want the process span %v", sc, process.SpanContext())
	}
	recs := records(t, &buf)
	if len(recs) != 2 {
		t.Fatalf("%d records", len(recs))
	}
	if recs[0]["trace_id"] != sc.TraceID().String() || recs[0]["span_id"] != sc.SpanID().String() {
		t.Errorf("record %v, want trace_id %s span_id %s", recs[0], sc.TraceID(), sc.SpanID())
	}
	if recs[0]["service"] != "shipping" || recs[0]["message_id"] != "m1" {
		t.Errorf("record lost its own fields: %v", recs[0])
	}
	if _, ok := recs[1]["trace_id"]; ok {
		t.Errorf("a record without a context got a trace id: %v", recs[1])
	}
	if strings.Contains(buf.String(), "secret body") {
		t.Errorf("a message body reached the log: %s", buf.String())
	}
	for k := range recs[0] {
		switch k {
		case "time", "level", "msg", "service", "message_id", "trace_id", "span_id":
		default:
			t.Errorf("unexpected field %q", k)
		}
	}
}

func TestLogHandlerPassesThrough(t *testing.T) {
	var buf bytes.Buffer
	inner := slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn})
	h := otelmq.LogHandler(inner)
	if otelmq.LogHandler(h) != h {
		t.Errorf("wrapping twice wraps twice")
	}
	if h.Enabled(context.Background(), slog.LevelInfo) {
		t.Errorf("Enabled ignores the inner handler's level")
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}})
	ctx := trace.ContextWithSpanContext(context.Background(), sc)
	slog.New(h).WithGroup("g").WarnContext(ctx, "x", "a", 1)
	recs := records(t, &buf)
	g, _ := recs[0]["g"].(map[string]any)
	if g["a"] != float64(1) || g["trace_id"] != sc.TraceID().String() {
		t.Errorf("record %v", recs[0])
	}
	// A record handed to two handlers (slog's own fan-out does this) is not
	// corrupted by the fields added to it.
	r := slog.NewRecord(time.Now(), slog.LevelWarn, "y", 0)
	r.AddAttrs(slog.Int("a", 1), slog.Int("b", 2), slog.Int("c", 3), slog.Int("d", 4), slog.Int("e", 5), slog.Int("f", 6))
	buf.Reset()
	_ = h.Handle(ctx, r)
	_ = inner.Handle(ctx, r)
	recs = records(t, &buf)
	if _, ok := recs[1]["trace_id"]; ok || recs[1]["f"] != float64(6) {
		t.Errorf("the original record changed: %v", recs[1])
	}
}
