package otelmq

import (
	"context"
	"log/slog"

	"go.opentelemetry.io/otel/trace"
)

// The log fields [LogHandler] adds.
const (
	LogTraceID = "trace_id"
	LogSpanID  = "span_id"
)

// LogHandler wraps h so that every record logged with a context carrying a
// valid span (logger.InfoContext(ctx, …), LogAttrs(ctx, …)) gets two more
// fields: trace_id and span_id, in hex, the way trace backends print them.
// Nothing else is added: never a message body, never a credential. Records
// logged without a context, or with one that carries no span, pass through
// unchanged.
//
// Inside a handler and in the library's middleware, ctx carries the
// delivery's process span. Put it on the logger the broker gets
// ([mq.Config.Logger]) and on your own:
//
//	log := slog.New(otelmq.LogHandler(slog.NewJSONHandler(os.Stderr, nil)))
//
// Like any attribute added while a record is handled, the two fields land
// inside the groups the logger has open (logger.WithGroup).
func LogHandler(h slog.Handler) slog.Handler {
	if lh, ok := h.(*logHandler); ok {
		return lh
	}
	return &logHandler{h: h}
}

type logHandler struct{ h slog.Handler }

func (l *logHandler) Enabled(ctx context.Context, level slog.Level) bool {
	return l.h.Enabled(ctx, level)
}

func (l *logHandler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r = r.Clone() // the caller's record may share its attribute storage
		r.AddAttrs(slog.String(LogTraceID, sc.TraceID().String()), slog.String(LogSpanID, sc.SpanID().String()))
	}
	return l.h.Handle(ctx, r)
}

func (l *logHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &logHandler{h: l.h.WithAttrs(attrs)}
}

func (l *logHandler) WithGroup(name string) slog.Handler {
	return &logHandler{h: l.h.WithGroup(name)}
}
