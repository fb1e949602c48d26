package otelmq

import (
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/semconv/v1.43.0/messagingconv"
)

// durationBuckets are the bucket boundaries the messaging conventions
// advise for messaging.client.operation.duration and
// messaging.process.duration, in seconds.
var durationBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10}

// AceMQ's own metric names (the messaging ones come from semconv).
const (
	metricRetries        = "acemq.retries"
	metricOutcomes       = "acemq.message.outcomes"
	metricRungMissing    = "acemq.retry.rung.missing"
	metricSetAsideFailed = "acemq.messages.set.aside.failed"
	metricRequeues       = "acemq.message.requeues"
)

type instruments struct {
	sent           metric.Int64Counter
	consumed       metric.Int64Counter
	opDuration     metric.Float64Histogram
	processing     metric.Float64Histogram
	retries        metric.Int64Counter
	outcomes       metric.Int64Counter
	rungMissing    metric.Int64Counter
	setAsideFailed metric.Int64Counter
	requeues       metric.Int64Counter
}

func newInstruments(m metric.Meter) instruments {
	var in instruments
	sent, err := messagingconv.NewClientSentMessages(m)
	in.sent = counter(sent.Inst(), err)
	consumed, err := messagingconv.NewClientConsumedMessages(m)
	in.consumed = counter(consumed.Inst(), err)
	op, err := messagingconv.NewClientOperationDuration(m, metric.WithExplicitBucketBoundaries(durationBuckets...))
	in.opDuration = histogram(op.Inst(), err)
	proc, err := messagingconv.NewProcessDuration(m, metric.WithExplicitBucketBoundaries(durationBuckets...))
	in.processing = histogram(proc.Inst(), err)

	in.retries = counter(m.Int64Counter(metricRetries,
		metric.WithUnit("{retry}"),
		metric.WithDescription("Failed attempts that were retried, by where the retry waits (acemq.retry.kind: in-process or broker).")))
	in.outcomes = counter(m.Int64Counter(metricOutcomes,
		metric.WithUnit("{message}"),
		metric.WithDescription("Deliveries by what became of them (acemq.outcome).")))
	in.rungMissing = counter(m.Int64Counter(metricRungMissing,
		metric.WithUnit("{message}"),
		metric.WithDescription("Retries whose broker rung did not exist; the message was set aside in the dead-letter queue instead.")))
	in.setAsideFailed = counter(m.Int64Counter(metricSetAsideFailed,
		metric.WithUnit("{message}"),
		metric.WithDescription("Messages that could not be set aside in .dlq or .parked and were returned to their queue.")))
	in.requeues = counter(m.Int64Counter(metricRequeues,
		metric.WithUnit("{message}"),
		metric.WithDescription("Deliveries the library returned to their queue itself, by why (acemq.requeue.reason); on a quorum queue each counts against its delivery limit.")))
	return in
}

func counter(c metric.Int64Counter, err error) metric.Int64Counter {
	if err != nil {
		otel.Handle(err)
	}
	if c == nil {
		return noop.Int64Counter{}
	}
	return c
}

func histogram(h metric.Float64Histogram, err error) metric.Float64Histogram {
	if err != nil {
		otel.Handle(err)
	}
	if h == nil {
		return noop.Float64Histogram{}
	}
	return h
}
