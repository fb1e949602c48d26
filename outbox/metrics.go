package outbox

import (
	"context"
	"math"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/acemq/acemq-go/mq"
)

// ScopeName is the instrumentation scope of this package's instruments.
const ScopeName = "github.com/acemq/acemq-go/outbox"

// The package's metrics.
const (
	// MetricPublishes counts the relay's publishes by acemq.outbox.outcome:
	// published (confirmed, row deleted), retry (refused, tried again
	// later), set-aside. Its published rate is the relay's publish rate.
	MetricPublishes = "acemq.outbox.publishes"
	// MetricDepth is the outbox table's rows, by acemq.outbox.state:
	// pending or set-aside (refreshed by each relay about once per
	// PollInterval, at least 1 s apart).
	MetricDepth = "acemq.outbox.depth"
	// MetricOldestAge is the age of the oldest pending row, in seconds: how
	// far the relay is behind. The oldest is the first pending row in the
	// order rows were written (id), the next the relays send: the row
	// RelayCheck reports too.
	MetricOldestAge = "acemq.outbox.oldest.age"
	// MetricDuplicates counts deliveries the inbox acknowledged without
	// calling the handler.
	MetricDuplicates = "acemq.inbox.duplicates"
)

// The attributes of the metrics.
const (
	// OutcomeKey is a relay publish's outcome (MetricPublishes).
	OutcomeKey = attribute.Key("acemq.outbox.outcome")
	// StateKey is a row's state (MetricDepth).
	StateKey = attribute.Key("acemq.outbox.state")
)

const (
	outcomePublished = "published"
	outcomeRetry     = "retry"
	outcomeSetAside  = "set-aside"
)

func meter(mp metric.MeterProvider) metric.Meter {
	return mp.Meter(ScopeName, metric.WithInstrumentationVersion(mq.Version))
}

type relayMetrics struct {
	meter                                  metric.Meter
	publishes                              metric.Int64Counter
	depth                                  metric.Int64ObservableGauge
	age                                    metric.Float64ObservableGauge
	pending, aside                         atomic.Int64
	ageBits                                atomic.Uint64
	attrPublished, attrRetry, attrSetAside metric.AddOption
	attrPending, attrAsideState            metric.ObserveOption
}

func newRelayMetrics(mp metric.MeterProvider) *relayMetrics {
	m := &relayMetrics{meter: meter(mp),
		attrPublished:  metric.WithAttributes(OutcomeKey.String(outcomePublished)),
		attrRetry:      metric.WithAttributes(OutcomeKey.String(outcomeRetry)),
		attrSetAside:   metric.WithAttributes(OutcomeKey.String(outcomeSetAside)),
		attrPending:    metric.WithAttributes(StateKey.String("pending")),
		attrAsideState: metric.WithAttributes(StateKey.String("set-aside")),
	}
	var err error
	if m.publishes, err = m.meter.Int64Counter(MetricPublishes, metric.WithUnit("{message}"),
		metric.WithDescription("The outbox relay's publishes, by outcome (acemq.outbox.outcome).")); err != nil {
		otel.Handle(err)
		m.publishes = noop.Int64Counter{}
	}
	if m.depth, err = m.meter.Int64ObservableGauge(MetricDepth, metric.WithUnit("{row}"),
		metric.WithDescription("Rows in the outbox table, by state (acemq.outbox.state).")); err != nil {
		otel.Handle(err)
		m.depth = noop.Int64ObservableGauge{}
	}
	if m.age, err = m.meter.Float64ObservableGauge(MetricOldestAge, metric.WithUnit("s"),
		metric.WithDescription("Age of the oldest pending outbox row.")); err != nil {
		otel.Handle(err)
		m.age = noop.Float64ObservableGauge{}
	}
	return m
}

// observe registers the gauges' callback for as long as the relay runs.
func (m *relayMetrics) observe() func() {
	reg, err := m.meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		o.ObserveInt64(m.depth, m.pending.Load(), m.attrPending)
		o.ObserveInt64(m.depth, m.aside.Load(), m.attrAsideState)
		o.ObserveFloat64(m.age, math.Float64frombits(m.ageBits.Load()))
		return nil
	}, m.depth, m.age)
	if err != nil {
		otel.Handle(err)
		return func() {}
	}
	return func() { _ = reg.Unregister() }
}

func (m *relayMetrics) set(pending, aside int64, age float64) {
	m.pending.Store(pending)
	m.aside.Store(aside)
	m.ageBits.Store(math.Float64bits(age))
}

func (m *relayMetrics) published(ctx context.Context, n int) {
	if n > 0 {
		m.publishes.Add(ctx, int64(n), m.attrPublished)
	}
}

func (m *relayMetrics) outcome(ctx context.Context, o string) {
	switch o {
	case outcomeRetry:
		m.publishes.Add(ctx, 1, m.attrRetry)
	case outcomeSetAside:
		m.publishes.Add(ctx, 1, m.attrSetAside)
	}
}
