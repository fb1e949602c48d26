package otelmq_test

import (
	"context"
	"log"
	"log/slog"
	"os"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/otelmq"
)

// Instrument a broker: every publish, delivery, attempt and hop is traced
// and measured, and log records carry the trace.
func ExampleNew() {
	tp := sdktrace.NewTracerProvider() // add an exporter in a real service
	defer tp.Shutdown(context.Background())
	logger := slog.New(otelmq.LogHandler(slog.NewJSONHandler(os.Stderr, nil)))

	b := mq.New(mq.Config{URLs: []string{"amqp://guest:guest@127.0.0.1:5672/"}, Logger: logger,
		Hooks: []any{otelmq.New(otelmq.WithTracerProvider(tp))}})
	if err := b.Start(context.Background()); err != nil {
		log.Fatal(err)
	}
	defer b.Close(context.Background())
}
