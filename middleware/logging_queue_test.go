package middleware

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/acemq/acemq-go/mqtest"
)

// consumerLogger is a delivery logger as a consumer hands it out: its
// records go to rec, with the queue attribute the consumer's logger
// carries (mq's consumer builds it with With("queue", queue)).
func consumerLogger(rec *logRecorder, queue string) *slog.Logger {
	return slog.New(&withAttrs{rec: rec}).With("queue", queue)
}

// withAttrs is a logRecorder that keeps the attributes added by With.
type withAttrs struct {
	rec *logRecorder
	as  []slog.Attr
}

func (h *withAttrs) Enabled(ctx context.Context, l slog.Level) bool { return h.rec.Enabled(ctx, l) }
func (h *withAttrs) Handle(ctx context.Context, r slog.Record) error {
	r = r.Clone()
	r.AddAttrs(h.as...)
	return h.rec.Handle(ctx, r)
}
func (h *withAttrs) WithAttrs(as []slog.Attr) slog.Handler {
	return &withAttrs{rec: h.rec, as: append(append([]slog.Attr(nil), h.as...), as...)}
}
func (h *withAttrs) WithGroup(string) slog.Handler { return h }

// Logging writes to the delivery's logger, which says the queue already:
// its record carries queue= once, not a second time of its own.
func TestLoggingQueueAttributeOnce(t *testing.T) {
	var buf bytes.Buffer
	l := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})).With("queue", "orders")
	d := mqtest.NewDelivery("orders", sample(nil), mqtest.Logger(l))
	if err := mqtest.Chain(outcomeSetter("", nil), nil, Logging()).Handle(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	line := strings.TrimSpace(buf.String())
	if !strings.Contains(line, "acemq.message.settled") {
		t.Fatalf("no acemq.message.settled record: %q", line)
	}
	if n := strings.Count(line, " queue="); n != 1 || !strings.Contains(line, " queue=orders") {
		t.Errorf("the record carries queue= %d times, want once (orders): %s", n, line)
	}
}
