package otelmq_test

import (
	"context"
	"slices"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/metric/metricdata/metricdatatest"

	"github.com/acemq/acemq-go/mq"
)

var semconvBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10}

func sum(points ...metricdata.DataPoint[int64]) metricdata.Sum[int64] {
	return metricdata.Sum[int64]{Temporality: metricdata.CumulativeTemporality, IsMonotonic: true, DataPoints: points}
}

func point(n int64, kvs ...attribute.KeyValue) metricdata.DataPoint[int64] {
	return metricdata.DataPoint[int64]{Attributes: attribute.NewSet(kvs...), Value: n}
}

func hist(points ...metricdata.HistogramDataPoint[float64]) metricdata.Histogram[float64] {
	return metricdata.Histogram[float64]{Temporality: metricdata.CumulativeTemporality, DataPoints: points}
}

func hpoint(kvs ...attribute.KeyValue) metricdata.HistogramDataPoint[float64] {
	return metricdata.HistogramDataPoint[float64]{Attributes: attribute.NewSet(kvs...)}
}

var (
	system    = attribute.String("messaging.system", "rabbitmq")
	opPublish = attribute.String("messaging.operation.name", "publish")
	opSend    = attribute.String("messaging.operation.type", "send")
	opProcess = attribute.String("messaging.operation.name", "process")
	addr      = attribute.String("server.address", "rabbit.example")
	port      = attribute.Int("server.port", 5672)
)

func dest(q string) attribute.KeyValue { return attribute.String("messaging.destination.name", q) }

// The metrics of issue 5's scenario: every instrument's name, unit, kind
// and attributes.
func TestMetricsOfAMessageLife(t *testing.T) {
	r := newRig(t)
	r.life()
	// The two events the scenario does not produce.
	r.ins.OnEvent(context.Background(), mq.Event{Name: mq.EventRungMissing, Queue: "orders", Target: "orders.retry.1s"})
	r.ins.OnEvent(context.Background(), mq.Event{Name: mq.EventSetAsideFailed, Queue: "orders", Target: "orders.dlq"})
	r.ins.OnEvent(context.Background(), mq.Event{Name: mq.EventRequeued, Queue: "orders", Kind: "requeued"})
	r.ins.OnEvent(context.Background(), mq.Event{Name: mq.EventRequeued, Queue: "orders", Kind: "cut short"})
	got := r.collect()

	want := []metricdata.Metrics{
		{
			Name: "messaging.client.sent.messages", Unit: "{message}",
			Description: "Number of messages producer attempted to send to the broker.",
			Data: sum(
				point(1, system, opPublish, opSend, dest("orders"), addr, port),
				point(2, system, opPublish, opSend, dest("orders.retry.1s"), addr, port, attribute.String("acemq.hop", "retry")),
				point(1, system, opPublish, opSend, dest("orders.dlq"), addr, port, attribute.String("acemq.hop", "dead-letter")),
			),
		},
		{
			Name: "messaging.client.consumed.messages", Unit: "{message}",
			Description: "Number of messages that were delivered to the application.",
			Data:        sum(point(3, system, opProcess, dest("orders"))),
		},
		{
			Name: "acemq.retries", Unit: "{retry}",
			Description: "Failed attempts that were retried, by where the retry waits (acemq.retry.kind: in-process or broker).",
			Data: sum(
				point(2, system, dest("orders"), attribute.String("acemq.retry.kind", "in-process")),
				point(2, system, dest("orders"), attribute.String("acemq.retry.kind", "broker")),
			),
		},
		{
			Name: "acemq.message.outcomes", Unit: "{message}",
			Description: "Deliveries by what became of them (acemq.outcome).",
			Data: sum(
				point(2, system, dest("orders"), attribute.String("acemq.outcome", "retry")),
				point(1, system, dest("orders"), attribute.String("acemq.outcome", "dead-letter")),
			),
		},
		{
			Name: "acemq.retry.rung.missing", Unit: "{message}",
			Description: "Retries whose broker rung did not exist; the message was set aside in the dead-letter queue instead.",
			Data:        sum(point(1, system, dest("orders"))),
		},
		{
			Name: "acemq.messages.set.aside.failed", Unit: "{message}",
			Description: "Messages that could not be set aside in .dlq or .parked and were returned to their queue.",
			Data:        sum(point(1, system, dest("orders"))),
		},
		{
			Name: "acemq.message.requeues", Unit: "{message}",
			Description: "Deliveries the library returned to their queue itself, by why (acemq.requeue.reason); on a quorum queue each counts against its delivery limit.",
			Data: sum(
				point(1, system, dest("orders"), attribute.String("acemq.requeue.reason", "requeued")),
				point(1, system, dest("orders"), attribute.String("acemq.requeue.reason", "cut short")),
			),
		},
		{
			Name: "messaging.client.operation.duration", Unit: "s",
			Description: "Duration of messaging operation initiated by a producer or consumer client.",
			Data: hist(
				hpoint(system, opPublish, opSend, dest("orders"), addr, port),
				hpoint(system, opPublish, opSend, dest("orders.retry.1s"), addr, port, attribute.String("acemq.hop", "retry")),
				hpoint(system, opPublish, opSend, dest("orders.dlq"), addr, port, attribute.String("acemq.hop", "dead-letter")),
			),
		},
		{
			Name: "messaging.process.duration", Unit: "s",
			Description: "Duration of processing operation.",
			Data:        hist(hpoint(system, opProcess, dest("orders"), attribute.String("error.type", "_OTHER"))),
		},
	}
	if len(got) != len(want) {
		t.Errorf("%d metrics, want %d", len(got), len(want))
	}
	for _, w := range want {
		g, ok := got[w.Name]
		if !ok {
			t.Errorf("no metric %s", w.Name)
			continue
		}
		metricdatatest.AssertEqual(t, w, g, metricdatatest.IgnoreTimestamp(), metricdatatest.IgnoreValue(), metricdatatest.IgnoreExemplars())
		switch d := g.Data.(type) {
		case metricdata.Sum[int64]:
			metricdatatest.AssertEqual(t, w, g, metricdatatest.IgnoreTimestamp(), metricdatatest.IgnoreExemplars())
		case metricdata.Histogram[float64]:
			// Durations vary: check the counts and the advised buckets.
			counts := map[string]uint64{"orders": 1, "orders.retry.1s": 2, "orders.dlq": 1}
			for _, p := range d.DataPoints {
				if !slices.Equal(p.Bounds, semconvBuckets) {
					t.Errorf("%s: bounds %v, want %v", w.Name, p.Bounds, semconvBuckets)
				}
				q, _ := p.Attributes.Value("messaging.destination.name")
				want := counts[q.AsString()]
				if w.Name == "messaging.process.duration" {
					want = 3
				}
				if p.Count != want {
					t.Errorf("%s %s: count %d, want %d", w.Name, q.AsString(), p.Count, want)
				}
			}
		}
	}
}

// An acknowledged delivery has no error.type; a server-named queue is not
// a metric attribute.
func TestMetricsOfAnAck(t *testing.T) {
	r := newRig(t)
	r.queues["amq.gen-abc"] = []mq.Message{{MessageId: "m1"}}
	r.deliver(r.next("amq.gen-abc"), func(context.Context, *mq.Delivery) error { return nil }, 0, "", "")
	got := r.collect()
	metricdatatest.AssertEqual(t, metricdata.Metrics{
		Name: "messaging.process.duration", Unit: "s",
		Description: "Duration of processing operation.",
		Data:        hist(hpoint(system, opProcess)),
	}, got["messaging.process.duration"], metricdatatest.IgnoreTimestamp(), metricdatatest.IgnoreValue(), metricdatatest.IgnoreExemplars())
	metricdatatest.AssertEqual(t, metricdata.Metrics{
		Name: "acemq.message.outcomes", Unit: "{message}",
		Description: "Deliveries by what became of them (acemq.outcome).",
		Data:        sum(point(1, system, attribute.String("acemq.outcome", "ack"))),
	}, got["acemq.message.outcomes"], metricdatatest.IgnoreTimestamp(), metricdatatest.IgnoreExemplars())
}
