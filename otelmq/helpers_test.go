package otelmq_test

import (
	"context"
	"errors"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/mqtest"
	"github.com/acemq/acemq-go/otelmq"
)

const server = "rabbit.example:5672"

// rig is an Instrumentation wired to an in-memory span recorder and a
// manual metric reader, with a fake broker that runs the hooks the way mq
// does: publishes through PublishHook, deliveries through DeliveryHook,
// handler calls through AttemptHook (mqtest.Chain), events through
// EventHook.
type rig struct {
	t      *testing.T
	ins    *otelmq.Instrumentation
	spans  *tracetest.SpanRecorder
	reader *sdkmetric.ManualReader
	queues map[string][]mq.Message
	tag    uint64
}

func newRig(t *testing.T, opts ...otelmq.Option) *rig {
	t.Helper()
	sr := tracetest.NewSpanRecorder()
	reader := sdkmetric.NewManualReader()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() {
		_ = tp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	})
	opts = append([]otelmq.Option{
		otelmq.WithTracerProvider(tp),
		otelmq.WithMeterProvider(mp),
		otelmq.WithPropagators(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})),
	}, opts...)
	return &rig{t: t, ins: otelmq.New(opts...), spans: sr, reader: reader, queues: map[string][]mq.Message{}}
}

// publish runs a publish through the hooks as mq's Publisher does and
// "routes" it to queue (the routing key on the default exchange).
func (r *rig) publish(ctx context.Context, exchange, key string, m mq.Message, hop mq.Outcome, err error) error {
	if m.Headers == nil {
		m.Headers = amqp.Table{}
	}
	if m.MessageId == "" {
		m.MessageId = mq.NewMessageID()
	}
	p := &mq.PublishInfo{Exchange: exchange, RoutingKey: key, Mandatory: exchange == "", Hop: hop, Message: &m, Server: server}
	hctx := r.ins.OnPublish(ctx, p)
	r.ins.OnPublishDone(hctx, p, err)
	if err == nil {
		r.queues[key] = append(r.queues[key], m)
	}
	return err
}

// forward is a delivery's Forward, as mq's hop publisher runs it.
func (r *rig) forward(ctx context.Context, queue string, kind mq.Outcome, m mq.Message) error {
	return r.publish(ctx, "", queue, m, kind, nil)
}

// next takes the next message of queue as a delivery.
func (r *rig) next(queue string) *mq.Delivery {
	r.t.Helper()
	msgs := r.queues[queue]
	if len(msgs) == 0 {
		r.t.Fatalf("queue %s is empty", queue)
	}
	m := msgs[0]
	r.queues[queue] = msgs[1:]
	r.tag++
	raw := amqp.Delivery{
		Headers: m.Headers, MessageId: m.MessageId, CorrelationId: m.CorrelationId,
		Body: m.Body, DeliveryTag: r.tag, RoutingKey: queue,
	}
	return mqtest.NewDelivery(queue, raw, mqtest.OnHop(r.forward), mqtest.OnEvent(r.ins.OnEvent),
		mqtest.OnWait(func(context.Context, time.Duration) error { return nil }))
}

// deliver runs one delivery the way the consumer runtime and a retry
// ladder would: handler calls through the attempt hooks, in-process
// retries for inProcess more failures, then after a last failure the
// hop given (or an ack when the handler succeeds), decided by a
// middleware and carried out by the runtime (mqtest.Chain).
func (r *rig) deliver(d *mq.Delivery, h mq.HandlerFunc, inProcess int, hop mq.Outcome, hopTarget string) {
	r.t.Helper()
	ctx := r.ins.OnDelivery(context.Background(), d)
	failures := 0
	decide := func(next mq.Handler) mq.Handler {
		return mq.HandlerFunc(func(ctx context.Context, d *mq.Delivery) error {
			err := next.Handle(ctx, d)
			if err == nil {
				return nil
			}
			failures++
			switch {
			case failures <= inProcess:
				return &mq.Decision{Outcome: mq.OutcomeRetry, Wait: 50 * time.Millisecond, Cause: err}
			case hop == mq.OutcomeRetry:
				return &mq.Decision{Outcome: mq.OutcomeRetry, Queue: hopTarget, Wait: time.Second, Cause: err}
			case hop == mq.OutcomeDeadLetter:
				return &mq.Decision{Outcome: mq.OutcomeDeadLetter, Queue: hopTarget, Reason: mq.ReasonExhausted, Cause: err}
			case hop == mq.OutcomePark:
				return &mq.Decision{Outcome: mq.OutcomePark, Queue: hopTarget, Reason: mq.ReasonParked, Cause: err}
			}
			return err // rejected by the runtime
		})
	}
	chainErr := mqtest.Chain(h, []mq.AttemptHook{r.ins}, decide).Handle(ctx, d)
	r.ins.OnDeliveryDone(ctx, d, chainErr)
}

var errBoom = errors.New("boom")

func failing(context.Context, *mq.Delivery) error { return errBoom }

// attrs maps a span's attributes by key.
func attrs(kvs []attribute.KeyValue) map[attribute.Key]attribute.Value {
	m := make(map[attribute.Key]attribute.Value, len(kvs))
	for _, kv := range kvs {
		m[kv.Key] = kv.Value
	}
	return m
}

func (r *rig) collect() map[string]metricdata.Metrics {
	r.t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.reader.Collect(context.Background(), &rm); err != nil {
		r.t.Fatal(err)
	}
	out := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != otelmq.ScopeName || sm.Scope.Version != mq.Version {
			r.t.Errorf("scope %s %s, want %s %s", sm.Scope.Name, sm.Scope.Version, otelmq.ScopeName, mq.Version)
		}
		for _, m := range sm.Metrics {
			out[m.Name] = m
		}
	}
	return out
}
