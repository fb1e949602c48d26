// Command benchreport measures AceMQ for Go against raw amqp091-go on the
// same broker, in the same run, and prints a markdown table of throughput
// (with the ratio to raw), publish→handle latency at a fixed rate, and the
// middleware chain's cost. `make bench` runs it; the README's performance
// table is its output.
//
// Every throughput figure is the median of -rounds rounds, the contestants
// alternating round by round so drift on a busy machine hits both alike.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/acemq/acemq-go/middleware"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/mqtest"
	"github.com/acemq/acemq-go/otelmq"
	"github.com/acemq/acemq-go/retry"
	"github.com/acemq/acemq-go/topology"
)

var (
	url      = flag.String("url", envOr("AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/"), "broker URL")
	pubN     = flag.Int("publish", 20000, "messages per publishing round")
	conN     = flag.Int("consume", 20000, "messages per consuming round")
	rounds   = flag.Int("rounds", 3, "rounds per contestant (the median is reported)")
	prefetch = flag.Int("prefetch", 100, "consumer prefetch, the same for every consumer")
	rate     = flag.Int("rate", 500, "messages per second for the latency measurement")
	latFor   = flag.Duration("latency-for", 6*time.Second, "how long to measure latency")
	profile  = flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
)

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelInfo}))

func main() {
	flag.Parse()
	if *profile != "" {
		f, err := os.Create(*profile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "benchreport:", err)
			os.Exit(1)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, "benchreport:", err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	err := run(ctx)
	cancel()
	pprof.StopCPUProfile()
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchreport:", err)
		os.Exit(1)
	}
}

type row struct {
	name, baseline string
	rate           float64 // messages per second
	ratio          float64
}

func run(ctx context.Context) error {
	conn, err := amqp.Dial(*url)
	if err != nil {
		return fmt.Errorf("raw dial %s: %w", mq.Redact(*url), err)
	}
	defer conn.Close()
	version, _ := conn.Properties["version"].(string)

	b, err := mq.Dial(ctx, *url, mq.WithLogger(quiet))
	if err != nil {
		return err
	}
	defer b.Close(context.Background())

	q := "bench.acemq." + mq.NewMessageID()
	if err := b.Declare(ctx, topology.New().Queue(q, topology.Classic())); err != nil {
		return err
	}
	defer b.DeleteQueue(context.Background(), q)

	body := make([]byte, 256)
	for i := range body {
		body[i] = 'a' + byte(i%26)
	}
	purge := func() error {
		ch, err := conn.Channel()
		if err != nil {
			return err
		}
		defer ch.Close()
		_, err = ch.QueuePurge(q, false)
		return err
	}

	var rows []row
	// group runs the contestants round by round, rotating who goes first,
	// and records each one's median; ratios are to the first (raw).
	group := func(names []string, fns ...func() (float64, error)) ([]float64, error) {
		results := make([][]float64, len(fns))
		for i := 0; i < *rounds; i++ {
			for j := range fns {
				k := (i + j) % len(fns)
				if err := purge(); err != nil {
					return nil, err
				}
				r, err := fns[k]()
				if err != nil {
					return nil, fmt.Errorf("%s: %w", names[k], err)
				}
				results[k] = append(results[k], r)
			}
		}
		meds := make([]float64, len(fns))
		for k := range fns {
			meds[k] = median(results[k])
			r := row{name: names[k], rate: meds[k], ratio: meds[k] / meds[0]}
			if k > 0 {
				r.baseline = names[0]
			}
			rows = append(rows, r)
			fmt.Fprintf(os.Stderr, "  %-50s %8.0f msg/s   %.2fx\n", names[k], meds[k], r.ratio)
		}
		return meds, nil
	}
	pair := func(rawName, oursName string, raw, ours func() (float64, error)) error {
		_, err := group([]string{rawName, oursName}, raw, ours)
		return err
	}

	fmt.Fprintln(os.Stderr, "publishing (256-byte persistent messages, confirms on)…")
	if err := pair("raw amqp091-go, 64 confirms in flight", "Publisher.Publish from 64 goroutines",
		func() (float64, error) { return rawPublish(conn, q, body, *pubN, 64) },
		func() (float64, error) { return oursPublish(ctx, b, q, body, *pubN, 64) }); err != nil {
		return err
	}
	if err := pair("raw amqp091-go, 1000 confirms in flight", "Publisher.PublishBatch of 1000",
		func() (float64, error) { return rawPublish(conn, q, body, *pubN, 1000) },
		func() (float64, error) { return oursBatch(ctx, b, q, body, *pubN, 1000) }); err != nil {
		return err
	}

	fmt.Fprintf(os.Stderr, "consuming (prefetch %d, ack each, no-op handler)…\n", *prefetch)
	if err := pair("raw amqp091-go, manual ack", "Consume with middleware.Standard",
		func() (float64, error) {
			if err := fillQueue(ctx, b, q, *conN); err != nil {
				return 0, err
			}
			return rawConsume(conn, q, *conN, *prefetch)
		},
		func() (float64, error) {
			if err := fillQueue(ctx, b, q, *conN); err != nil {
				return 0, err
			}
			return oursConsume(ctx, b, q, *conN, *prefetch)
		}); err != nil {
		return err
	}

	// Tracing: every contestant consumes the same messages, published by
	// an instrumented service, so each carries a traceparent header (which
	// by itself costs every client, raw amqp091-go included, a good part of
	// its throughput: header tables are decoded per message).
	fmt.Fprintln(os.Stderr, "consuming messages that carry a traceparent…")
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discard{}))
	defer tp.Shutdown(context.Background())
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	traced, err := mq.Dial(ctx, *url, mq.WithLogger(quiet), mq.WithHooks(otelmq.New(otelmq.WithTracerProvider(tp), otelmq.WithMeterProvider(mp))))
	if err != nil {
		return err
	}
	defer traced.Close(context.Background())
	fillTraced := func() error { return fillQueue(ctx, traced, q, *conN) }
	meds, err := group([]string{"raw amqp091-go, manual ack (traced messages)", "Consume with middleware.Standard (traced messages)",
		"Consume with Standard + otelmq (traces, metrics)"},
		func() (float64, error) {
			if err := fillTraced(); err != nil {
				return 0, err
			}
			return rawConsume(conn, q, *conN, *prefetch)
		},
		func() (float64, error) {
			if err := fillTraced(); err != nil {
				return 0, err
			}
			return oursConsume(ctx, b, q, *conN, *prefetch)
		},
		func() (float64, error) {
			if err := fillTraced(); err != nil {
				return 0, err
			}
			return oursConsume(ctx, traced, q, *conN, *prefetch)
		})
	if err != nil {
		return err
	}
	tracingCost := meds[2] / meds[1]

	fmt.Fprintf(os.Stderr, "latency at %d msg/s for %v…\n", *rate, *latFor)
	if err := purge(); err != nil {
		return err
	}
	rawLat, err := rawLatency(ctx, conn, q, *rate, *latFor, *prefetch)
	if err != nil {
		return err
	}
	if err := purge(); err != nil {
		return err
	}
	ourLat, err := oursLatency(ctx, b, q, *rate, *latFor, *prefetch)
	if err != nil {
		return err
	}

	fmt.Fprintln(os.Stderr, "middleware chain (no broker)…")
	chain := chainBench()

	printReport(os.Stdout, version, rows, tracingCost, rawLat, ourLat, chain)
	return nil
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}

// rawPublish is the baseline: one channel in confirm mode, up to window
// deferred confirms in flight, the oldest awaited when the window is full.
func rawPublish(conn *amqp.Connection, q string, body []byte, n, window int) (float64, error) {
	ch, err := conn.Channel()
	if err != nil {
		return 0, err
	}
	defer ch.Close()
	if err := ch.Confirm(false); err != nil {
		return 0, err
	}
	inflight := make([]*amqp.DeferredConfirmation, 0, window)
	start := time.Now()
	for i := 0; i < n; i++ {
		dc, err := ch.PublishWithDeferredConfirm("", q, true, false, amqp.Publishing{
			Body: body, DeliveryMode: amqp.Persistent, MessageId: mq.NewMessageID(), Timestamp: time.Now()})
		if err != nil {
			return 0, err
		}
		inflight = append(inflight, dc)
		if len(inflight) == window {
			if !inflight[0].Wait() {
				return 0, fmt.Errorf("raw publish nacked")
			}
			inflight = inflight[1:]
		}
	}
	for _, dc := range inflight {
		if !dc.Wait() {
			return 0, fmt.Errorf("raw publish nacked")
		}
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

func oursPublish(ctx context.Context, b *mq.Broker, q string, body []byte, n, workers int) (float64, error) {
	p := b.Publisher("")
	defer p.Close()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	start := time.Now()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) {
				if err := p.Publish(ctx, q, mq.Message{Body: body}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	select {
	case err := <-errs:
		return 0, err
	default:
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

func oursBatch(ctx context.Context, b *mq.Broker, q string, body []byte, n, size int) (float64, error) {
	p := b.Publisher("")
	defer p.Close()
	msgs := make([]mq.Message, size)
	start := time.Now()
	for done := 0; done < n; done += size {
		k := min(size, n-done)
		for i := range msgs[:k] {
			msgs[i] = mq.Message{Body: body}
		}
		if err := p.PublishBatch(ctx, q, msgs[:k]); err != nil {
			return 0, err
		}
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

// fillQueue puts n small transient messages on q, outside any timing.
func fillQueue(ctx context.Context, b *mq.Broker, q string, n int) error {
	p := b.Publisher("")
	defer p.Close()
	msgs := make([]mq.Message, 1000)
	for done := 0; done < n; done += len(msgs) {
		k := min(len(msgs), n-done)
		for i := range msgs[:k] {
			msgs[i] = mq.Message{Body: []byte(`{"bench":true}`), DeliveryMode: amqp.Transient}
		}
		if err := p.PublishBatch(ctx, q, msgs[:k]); err != nil {
			return err
		}
	}
	return nil
}

func rawConsume(conn *amqp.Connection, q string, n, prefetch int) (float64, error) {
	ch, err := conn.Channel()
	if err != nil {
		return 0, err
	}
	defer ch.Close()
	if err := ch.Qos(prefetch, 0, false); err != nil {
		return 0, err
	}
	ds, err := ch.Consume(q, "bench-raw", false, false, false, false, nil)
	if err != nil {
		return 0, err
	}
	var start time.Time
	for i := 0; i < n; i++ {
		d, ok := <-ds
		if !ok {
			return 0, fmt.Errorf("raw consume ended after %d", i)
		}
		if i == 0 {
			start = time.Now()
		}
		if err := d.Ack(false); err != nil {
			return 0, err
		}
	}
	rate := float64(n-1) / time.Since(start).Seconds()
	return rate, ch.Cancel("bench-raw", false)
}

func oursConsume(ctx context.Context, b *mq.Broker, q string, n, prefetch int) (float64, error) {
	var seen atomic.Int64
	var start, end atomic.Int64
	done := make(chan struct{})
	h := mq.HandlerFunc(func(context.Context, *mq.Delivery) error {
		k := seen.Add(1)
		if k == 1 {
			start.Store(time.Now().UnixNano())
		}
		if k == int64(n) {
			end.Store(time.Now().UnixNano())
			close(done)
		}
		return nil
	})
	c, err := b.Consume(ctx, q, h, middleware.Standard(retry.Exponential(5, time.Second), middleware.WithoutDeclare()), mq.WithPrefetch(prefetch))
	if err != nil {
		return 0, err
	}
	defer c.Stop(context.Background())
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		return 0, fmt.Errorf("consumed only %d of %d", seen.Load(), n)
	}
	return float64(n-1) / (float64(end.Load()-start.Load()) / 1e9), nil
}

type latency struct{ p50, p99 time.Duration }

const sentAt = "x-bench-sent-at"

// paced publishes at rate for d, stamping each message with its send time.
func paced(ctx context.Context, d time.Duration, rate int, send func(ts int64) error) (int, error) {
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	deadline := time.Now().Add(d)
	n := 0
	for time.Now().Before(deadline) {
		select {
		case <-tick.C:
		case <-ctx.Done():
			return n, ctx.Err()
		}
		if err := send(time.Now().UnixNano()); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

func percentiles(xs []time.Duration) latency {
	slices.Sort(xs)
	if len(xs) == 0 {
		return latency{}
	}
	return latency{p50: xs[len(xs)/2], p99: xs[len(xs)*99/100]}
}

type recorder struct {
	mu  sync.Mutex
	lat []time.Duration
}

func (r *recorder) add(h amqp.Table) {
	if ts, ok := h[sentAt].(int64); ok {
		r.mu.Lock()
		r.lat = append(r.lat, time.Duration(time.Now().UnixNano()-ts))
		r.mu.Unlock()
	}
}

func (r *recorder) wait(n int) latency {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		r.mu.Lock()
		k := len(r.lat)
		r.mu.Unlock()
		if k >= n {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return percentiles(slices.Clone(r.lat))
}

func rawLatency(ctx context.Context, conn *amqp.Connection, q string, rate int, d time.Duration, prefetch int) (latency, error) {
	cch, err := conn.Channel()
	if err != nil {
		return latency{}, err
	}
	defer cch.Close()
	if err := cch.Qos(prefetch, 0, false); err != nil {
		return latency{}, err
	}
	ds, err := cch.Consume(q, "bench-lat", false, false, false, false, nil)
	if err != nil {
		return latency{}, err
	}
	rec := &recorder{}
	go func() {
		for d := range ds {
			rec.add(d.Headers)
			_ = d.Ack(false)
		}
	}()
	pch, err := conn.Channel()
	if err != nil {
		return latency{}, err
	}
	defer pch.Close()
	if err := pch.Confirm(false); err != nil {
		return latency{}, err
	}
	n, err := paced(ctx, d, rate, func(ts int64) error {
		dc, err := pch.PublishWithDeferredConfirm("", q, true, false, amqp.Publishing{Body: []byte("x"), DeliveryMode: amqp.Persistent, Headers: amqp.Table{sentAt: ts}})
		if err != nil {
			return err
		}
		dc.Wait()
		return nil
	})
	if err != nil {
		return latency{}, err
	}
	l := rec.wait(n)
	_ = cch.Cancel("bench-lat", false)
	return l, nil
}

func oursLatency(ctx context.Context, b *mq.Broker, q string, rate int, d time.Duration, prefetch int) (latency, error) {
	rec := &recorder{}
	c, err := b.Consume(ctx, q, mq.HandlerFunc(func(_ context.Context, d *mq.Delivery) error {
		rec.add(d.Headers)
		return nil
	}), middleware.Standard(retry.Exponential(5, time.Second), middleware.WithoutDeclare()), mq.WithPrefetch(prefetch))
	if err != nil {
		return latency{}, err
	}
	defer c.Stop(context.Background())
	p := b.Publisher("")
	defer p.Close()
	n, err := paced(ctx, d, rate, func(ts int64) error {
		return p.Publish(ctx, q, mq.Message{Body: []byte("x"), Headers: amqp.Table{sentAt: ts}})
	})
	if err != nil {
		return latency{}, err
	}
	return rec.wait(n), nil
}

type chainResult struct {
	nsPerOp, allocs float64
}

// chainBench times the standard stack's middleware around a no-op handler,
// no broker involved, one fresh Delivery per message as the runtime makes.
func chainBench() chainResult {
	h := mq.Chain(mqtest.Attempts(mq.HandlerFunc(func(context.Context, *mq.Delivery) error { return nil })),
		middleware.DeclareOnStart(), middleware.Logging(quiet), middleware.RetryLadder(retry.Exponential(5, time.Second)),
		middleware.Parking(), middleware.Recover())
	raw := amqp.Delivery{Body: []byte("x"), MessageId: "m"}
	r := testing.Benchmark(func(b *testing.B) {
		b.ReportAllocs()
		ctx := context.Background()
		for b.Loop() {
			_ = h.Handle(ctx, mqtest.NewDelivery("q", raw))
		}
	})
	return chainResult{nsPerOp: float64(r.NsPerOp()), allocs: float64(r.AllocsPerOp())}
}

type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

func printReport(w io.Writer, version string, rows []row, tracingCost float64, rawLat, ourLat latency, chain chainResult) {
	fmt.Fprintf(w, "Measured %s on RabbitMQ %s (local), %s, %d CPUs, %d rounds each (median).\n\n",
		time.Now().UTC().Format("2006-01-02"), version, runtime.Version(), runtime.NumCPU(), *rounds)
	fmt.Fprintln(w, "| what | msgs/s | vs raw amqp091-go |")
	fmt.Fprintln(w, "| --- | ---: | ---: |")
	for _, r := range rows {
		ratio := "(baseline)"
		if r.baseline != "" {
			ratio = fmt.Sprintf("%.2fx", r.ratio)
		}
		fmt.Fprintf(w, "| %s | %.0f | %s |\n", strings.TrimSpace(r.name), r.rate, ratio)
	}
	fmt.Fprintf(w, "\nTracing and metrics on (otelmq; SDK, every trace sampled, batch span processor, discarding exporter) vs the same stack without, on the same traced messages: %.2fx.\n", tracingCost)
	fmt.Fprintf(w, "\nPublish→handle latency at %d msg/s for %v (persistent, confirmed):\n\n", *rate, *latFor)
	fmt.Fprintln(w, "| what | p50 | p99 |")
	fmt.Fprintln(w, "| --- | ---: | ---: |")
	fmt.Fprintf(w, "| raw amqp091-go | %v | %v |\n", rawLat.p50.Round(10*time.Microsecond), rawLat.p99.Round(10*time.Microsecond))
	fmt.Fprintf(w, "| Publisher + Consume with Standard | %v | %v |\n", ourLat.p50.Round(10*time.Microsecond), ourLat.p99.Round(10*time.Microsecond))
	fmt.Fprintf(w, "\nThe standard middleware chain alone (no broker), per message: %.0f ns, %.0f allocs.\n", chain.nsPerOp, chain.allocs)
}
