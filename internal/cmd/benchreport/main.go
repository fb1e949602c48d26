package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
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
	url       = flag.String("url", envOr("AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/"), "broker URL")
	pubN      = flag.Int("publish", 10000, "messages per publishing round")
	conN      = flag.Int("consume", 10000, "messages per consuming round")
	rounds    = flag.Int("rounds", 5, "rounds per contestant (the median is reported)")
	prefetchs = flag.String("prefetch", "100,1000", "consumer prefetches to measure, comma-separated")
	tracedPf  = flag.Int("traced-prefetch", 100, "prefetch of the tracing comparison")
	workers   = flag.Int("publishers", 1000, "goroutines sharing one Publisher (and confirms in flight for raw)")
	rate      = flag.Int("rate", 500, "messages per second for the latency measurement")
	latFor    = flag.Duration("latency-for", 4*time.Second, "how long to measure latency")
	brokerPID = flag.Int("broker-pid", 0, "the broker's OS process (default: asked with rabbitmqctl, else the only beam.smp)")
	spanProc  = flag.String("span-processor", "batch", "the traced contestant's span processor: batch (what services use) or simple (synchronous, no goroutine hand-off)")
	only      = flag.String("only", "", "run only the groups whose title contains this")
	profile   = flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	memprof   = flag.String("memprofile", "", "write an allocation profile of the whole run to this file")
	quorum    = flag.Bool("quorum", true, "also measure consuming and publishing on quorum queues (the library's default queue type)")
)

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelInfo}))

// dial connects a Broker to -url that logs to quiet, with hooks.
func dial(ctx context.Context, hooks ...any) (*mq.Broker, error) {
	b := mq.New(mq.Config{URLs: []string{*url}, Logger: quiet, Hooks: hooks})
	if err := b.Start(ctx); err != nil {
		return nil, err
	}
	return b, nil
}

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
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	if *memprof != "" {
		runtime.MemProfileRate = 4096 // enough samples to name every allocation site on the path
	}
	err := run(ctx)
	cancel()
	pprof.StopCPUProfile()
	if *memprof != "" && err == nil {
		err = writeHeapProfile(*memprof)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchreport:", err)
		os.Exit(1)
	}
}

func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// ---- measuring ----

// probe reads the clocks a round is measured with.
type probe struct {
	brokerPID int // 0: unknown
	clkTck    float64
}

// mark is the state of the clocks at one instant.
type mark struct {
	at      time.Time
	client  time.Duration // this process's user+system CPU
	broker  time.Duration // the broker process's utime+stime
	mallocs uint64        // heap allocations of this process so far
}

func (p *probe) mark() mark {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	m := mark{client: processCPU(), broker: p.brokerCPU(), mallocs: ms.Mallocs}
	m.at = time.Now()
	return m
}

// sample is one contestant's round: n messages between two marks.
type sample struct {
	rate      float64 // messages per second
	clientCPU float64 // µs per message
	brokerCPU float64 // µs per message; NaN when the broker is unknown
	allocs    float64 // per message
}

func (p *probe) between(a, b mark, n int) sample {
	f := float64(n)
	s := sample{
		rate:      f / b.at.Sub(a.at).Seconds(),
		clientCPU: float64((b.client - a.client).Nanoseconds()) / 1e3 / f,
		brokerCPU: math.NaN(),
		allocs:    float64(b.mallocs-a.mallocs) / f,
	}
	if p.brokerPID != 0 {
		s.brokerCPU = float64((b.broker - a.broker).Nanoseconds()) / 1e3 / f
	}
	return s
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// brokerCPU is the broker process's utime+stime (fields 14 and 15 of
// /proc/<pid>/stat, in clock ticks).
func (p *probe) brokerCPU() time.Duration {
	if p.brokerPID == 0 {
		return 0
	}
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(p.brokerPID) + "/stat")
	if err != nil {
		return 0
	}
	// The command name, field 2, is in parentheses and may hold spaces.
	i := bytes.LastIndexByte(raw, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(raw[i+1:])) // f[0] is field 3
	if len(f) < 13 {
		return 0
	}
	ut, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0
	}
	return time.Duration(float64(ut+st) / p.clkTck * float64(time.Second))
}

// findBroker finds the broker's OS process: -broker-pid, else what
// `rabbitmqctl eval 'os:getpid().'` says, else the only beam.smp running.
func findBroker(ctx context.Context) (int, string) {
	if *brokerPID != 0 {
		return *brokerPID, "-broker-pid"
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	// RABBITMQCTL, as the tests read it: the command for the broker at
	// -url when it is not the machine's own (scripts/broker.sh env 4.3).
	ctl := strings.Fields(os.Getenv("RABBITMQCTL"))
	if len(ctl) == 0 {
		ctl = []string{"rabbitmqctl"}
	}
	if out, err := exec.CommandContext(cctx, ctl[0], append(ctl[1:], "eval", "os:getpid().")...).Output(); err == nil {
		if pid, err := strconv.Atoi(strings.Trim(strings.TrimSpace(string(out)), `"`)); err == nil && pid > 0 {
			return pid, "rabbitmqctl eval 'os:getpid().'"
		}
	}
	if out, err := exec.CommandContext(cctx, "pgrep", "-x", "beam.smp").Output(); err == nil {
		if f := strings.Fields(string(out)); len(f) == 1 {
			if pid, err := strconv.Atoi(f[0]); err == nil {
				return pid, "the only beam.smp"
			}
		}
	}
	return 0, ""
}

// ---- groups of contestants ----

// contestant is one way of doing a group's job. prepare runs before each
// of its rounds, outside the measurement (filling the queue); run does the
// job and returns the marks around it and how many messages it moved.
type contestant struct {
	name    string
	prepare func() error
	run     func() (a, b mark, n int, err error)
}

// result is a contestant's medians over the rounds.
type result struct {
	name string
	sample
	ratio float64 // median of the per-round ratios of rate to the baseline's
}

type group struct {
	title   string
	results []result   // the first is the baseline
	per     [][]sample // every round of every contestant
	note    string
}

// pairedRatio is the median over the rounds of contestant i's throughput
// to contestant j's in the same round.
func (g group) pairedRatio(i, j int) float64 {
	var rs []float64
	for r := range g.per[i] {
		rs = append(rs, g.per[i][r].rate/g.per[j][r].rate)
	}
	return median(rs)
}

func median(xs []float64) float64 {
	s := slices.DeleteFunc(slices.Clone(xs), func(x float64) bool { return math.IsNaN(x) })
	if len(s) == 0 {
		return math.NaN()
	}
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// runGroup runs every contestant *rounds times, alternating: in round i
// contestant (i+j) mod len goes j-th. purge empties the group's queues
// before every round.
func runGroup(p *probe, title string, purge func() error, cs []contestant) (group, error) {
	fmt.Fprintf(os.Stderr, "%s\n", title)
	per := make([][]sample, len(cs))
	for i := 0; i < *rounds; i++ {
		got := make([]sample, len(cs))
		for j := range cs {
			k := (i + j) % len(cs)
			if err := purge(); err != nil {
				return group{}, err
			}
			if cs[k].prepare != nil {
				if err := cs[k].prepare(); err != nil {
					return group{}, fmt.Errorf("%s: prepare: %w", cs[k].name, err)
				}
			}
			runtime.GC() // the fill's garbage is not the contestant's
			var a, b mark
			var n int
			var err error
			// Labelled, so a -cpuprofile can be read per contestant
			// (go tool pprof -tagfocus contestant=...).
			pprof.Do(context.Background(), pprof.Labels("contestant", cs[k].name), func(context.Context) {
				a, b, n, err = cs[k].run()
			})
			if err != nil {
				return group{}, fmt.Errorf("%s: %w", cs[k].name, err)
			}
			got[k] = p.between(a, b, n)
		}
		for k := range cs {
			per[k] = append(per[k], got[k])
		}
	}
	g := group{title: title, per: per}
	for k, c := range cs {
		var rates, cl, br, al, ratios []float64
		for i, s := range per[k] {
			rates, cl, br, al = append(rates, s.rate), append(cl, s.clientCPU), append(br, s.brokerCPU), append(al, s.allocs)
			ratios = append(ratios, s.rate/per[0][i].rate)
		}
		r := result{name: c.name, ratio: median(ratios),
			sample: sample{rate: median(rates), clientCPU: median(cl), brokerCPU: median(br), allocs: median(al)}}
		g.results = append(g.results, r)
		fmt.Fprintf(os.Stderr, "  %-58s %7.0f msg/s  %.2fx  client %5.1f µs  broker %5.1f µs  %5.1f allocs\n",
			r.name, r.rate, r.ratio, r.clientCPU, r.brokerCPU, r.allocs)
	}
	return g, nil
}

// ---- the run ----

func run(ctx context.Context) error {
	pid, how := findBroker(ctx)
	p := &probe{brokerPID: pid, clkTck: 100} // USER_HZ: 100 on every Linux
	if pid == 0 {
		fmt.Fprintln(os.Stderr, "benchreport: the broker's process was not found (no rabbitmqctl, not exactly one beam.smp): broker CPU is not reported; pass -broker-pid")
	} else {
		fmt.Fprintf(os.Stderr, "broker process %d (%s)\n", pid, how)
	}

	conn, err := amqp.Dial(*url)
	if err != nil {
		return fmt.Errorf("raw dial %s: %w", mq.Redact(*url), err)
	}
	defer conn.Close()
	version, _ := conn.Properties["version"].(string)

	b, err := dial(ctx)
	if err != nil {
		return err
	}
	defer b.Close(context.Background())
	// The fills go through a connection of their own: the broker throttles
	// a connection that publishes hard (credit flow), and no contestant's
	// acks should queue behind that.
	filler, err := dial(ctx)
	if err != nil {
		return err
	}
	defer filler.Close(context.Background())

	base := "bench.acemq." + mq.NewMessageID()
	queues := []string{base, base + ".1", base + ".2", base + ".3"}
	// The same on quorum queues, the library's default type.
	qqueues := []string{base + ".q", base + ".q.1", base + ".q.2", base + ".q.3"}
	plan := topology.New()
	for _, q := range queues {
		plan = plan.Queue(q, topology.Classic())
	}
	if *quorum {
		for _, q := range qqueues {
			plan = plan.Queue(q, topology.Quorum())
		}
	}
	if err := b.Declare(ctx, plan); err != nil {
		return err
	}
	all := slices.Concat(queues, qqueues)
	defer func() {
		for _, q := range all {
			_, _ = b.DeleteQueue(context.Background(), q)
		}
	}()
	q, qq := queues[0], qqueues[0]

	body := make([]byte, 256)
	for i := range body {
		body[i] = 'a' + byte(i%26)
	}
	purgeAll := func() error {
		ch, err := conn.Channel()
		if err != nil {
			return err
		}
		defer ch.Close()
		for _, q := range queues {
			if _, err := ch.QueuePurge(q, false); err != nil {
				return err
			}
		}
		if *quorum {
			for _, q := range qqueues {
				if _, err := ch.QueuePurge(q, false); err != nil {
					return err
				}
			}
		}
		return nil
	}
	fill := func(via *mq.Broker) func() error {
		return func() error { return fillQueue(ctx, via, q, body, *conN) }
	}
	qfill := func() error { return fillQueue(ctx, filler, qq, body, *conN) }
	want := func(title string) bool { return *only == "" || strings.Contains(title, *only) }

	var groups []group
	add := func(title string, cs []contestant) error {
		if !want(title) {
			return nil
		}
		g, err := runGroup(p, title, purgeAll, cs)
		if err != nil {
			return err
		}
		groups = append(groups, g)
		return nil
	}

	var pfs []int
	for _, s := range strings.Split(*prefetchs, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return fmt.Errorf("-prefetch %q: want positive numbers", *prefetchs)
		}
		pfs = append(pfs, n)
	}
	for _, pf := range pfs {
		title := fmt.Sprintf("Consuming, prefetch %d (256-byte persistent messages, classic queue, no-op handler)", pf)
		if err := add(title, []contestant{
			{name: "raw amqp091-go, `Ack(tag, false)` per message", prepare: fill(filler),
				run: func() (mark, mark, int, error) { return rawConsume(p, conn, q, *conN, pf, 1) }},
			{name: "raw, `Ack(tag, multiple=true)` every 10", prepare: fill(filler),
				run: func() (mark, mark, int, error) { return rawConsume(p, conn, q, *conN, pf, 10) }},
			{name: "raw, `multiple=true` every 50", prepare: fill(filler),
				run: func() (mark, mark, int, error) { return rawConsume(p, conn, q, *conN, pf, 50) }},
			{name: "`Consume` with `middleware.Standard`", prepare: fill(filler),
				run: func() (mark, mark, int, error) { return oursConsume(ctx, p, b, q, *conN, pf) }},
			{name: "raw, auto-ack (no acks at all: a ceiling, not a target)", prepare: fill(filler),
				run: func() (mark, mark, int, error) { return rawConsume(p, conn, q, *conN, pf, 0) }},
		}); err != nil {
			return err
		}
	}

	title := fmt.Sprintf("Publishing, %d goroutines round-robin over four queues (256-byte persistent, confirms on)", *workers)
	if err := add(title, []contestant{
		{name: fmt.Sprintf("raw amqp091-go, one channel, %d confirms in flight", *workers),
			run: func() (mark, mark, int, error) { return rawPublish(p, conn, queues, body, *pubN, *workers) }},
		{name: fmt.Sprintf("one `Publisher`, `Publish` from %d goroutines", *workers),
			run: func() (mark, mark, int, error) { return oursPublish(ctx, p, b, queues, body, *pubN, *workers) }},
	}); err != nil {
		return err
	}
	if *quorum {
		pf := pfs[0]
		title := fmt.Sprintf("Consuming, prefetch %d (256-byte persistent messages, quorum queue, no-op handler)", pf)
		if err := add(title, []contestant{
			{name: "raw amqp091-go, `Ack(tag, false)` per message", prepare: qfill,
				run: func() (mark, mark, int, error) { return rawConsume(p, conn, qq, *conN, pf, 1) }},
			{name: "raw, `Ack(tag, multiple=true)` every 10", prepare: qfill,
				run: func() (mark, mark, int, error) { return rawConsume(p, conn, qq, *conN, pf, 10) }},
			{name: "`Consume` with `middleware.Standard`", prepare: qfill,
				run: func() (mark, mark, int, error) { return oursConsume(ctx, p, b, qq, *conN, pf) }},
		}); err != nil {
			return err
		}
		title = fmt.Sprintf("Publishing, %d goroutines round-robin over four quorum queues (256-byte persistent, confirms on)", *workers)
		if err := add(title, []contestant{
			{name: fmt.Sprintf("raw amqp091-go, one channel, %d confirms in flight", *workers),
				run: func() (mark, mark, int, error) { return rawPublish(p, conn, qqueues, body, *pubN, *workers) }},
			{name: fmt.Sprintf("one `Publisher`, `Publish` from %d goroutines", *workers),
				run: func() (mark, mark, int, error) { return oursPublish(ctx, p, b, qqueues, body, *pubN, *workers) }},
		}); err != nil {
			return err
		}
	}
	title = "Publishing in batches of 1000, one queue"
	if err := add(title, []contestant{
		{name: "raw amqp091-go, one channel, 1000 confirms in flight",
			run: func() (mark, mark, int, error) { return rawPublish(p, conn, queues[:1], body, *pubN, 1000) }},
		{name: "`Publisher.PublishBatch` of 1000",
			run: func() (mark, mark, int, error) { return oursBatch(ctx, p, b, q, body, *pubN, 1000) }},
	}); err != nil {
		return err
	}

	// Tracing: every contestant consumes the same messages, published by
	// an instrumented service, so each carries a traceparent header.
	proc := sdktrace.NewBatchSpanProcessor(discard{})
	if *spanProc == "simple" {
		proc = sdktrace.NewSimpleSpanProcessor(discard{})
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(proc))
	defer tp.Shutdown(context.Background())
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	defer mp.Shutdown(context.Background())
	hooks := otelmq.New(otelmq.WithTracerProvider(tp), otelmq.WithMeterProvider(mp))
	traced, err := dial(ctx, hooks)
	if err != nil {
		return err
	}
	defer traced.Close(context.Background())
	// The same, traces only: the metric SDK's own work per measurement is
	// a good part of the whole.
	tracesOnly, err := dial(ctx,
		otelmq.New(otelmq.WithTracerProvider(tp), otelmq.WithMeterProvider(metricnoop.NewMeterProvider())))
	if err != nil {
		return err
	}
	defer tracesOnly.Close(context.Background())
	tracedFiller, err := dial(ctx, hooks)
	if err != nil {
		return err
	}
	defer tracedFiller.Close(context.Background())
	flushFill := func() error {
		if err := fill(tracedFiller)(); err != nil {
			return err
		}
		return tp.ForceFlush(ctx) // the fill's spans are not the consumer's
	}
	pf := *tracedPf
	title = fmt.Sprintf("Tracing, prefetch %d (messages carrying a `traceparent`; SDK, every trace sampled, %s span processor)", pf, *spanProc)
	if want(title) {
		g, err := runGroup(p, title, purgeAll, []contestant{
			{name: "raw amqp091-go, `Ack(tag, false)` per message", prepare: flushFill,
				run: func() (mark, mark, int, error) { return rawConsume(p, conn, q, *conN, pf, 1) }},
			{name: "`Consume` with `middleware.Standard`, no tracing", prepare: flushFill,
				run: func() (mark, mark, int, error) { return oursConsume(ctx, p, b, q, *conN, pf) }},
			{name: "`Consume` with `middleware.Standard` + otelmq (traces, metrics)", prepare: flushFill,
				run: func() (mark, mark, int, error) { return oursConsume(ctx, p, traced, q, *conN, pf) }},
			{name: "`Consume` with `middleware.Standard` + otelmq (traces only)", prepare: flushFill,
				run: func() (mark, mark, int, error) { return oursConsume(ctx, p, tracesOnly, q, *conN, pf) }},
		})
		if err != nil {
			return err
		}
		g.note = fmt.Sprintf("traced vs the same stack untraced: %.2fx the throughput, %+.1f µs of client CPU per message with traces only; %.2fx, %+.1f µs with traces and metrics",
			g.pairedRatio(3, 1), g.results[3].clientCPU-g.results[1].clientCPU,
			g.pairedRatio(2, 1), g.results[2].clientCPU-g.results[1].clientCPU)
		fmt.Fprintln(os.Stderr, "  "+g.note)
		groups = append(groups, g)
	}

	var rawLat, ourLat latency
	if want("latency") {
		fmt.Fprintf(os.Stderr, "latency at %d msg/s for %v…\n", *rate, *latFor)
		if err := purgeAll(); err != nil {
			return err
		}
		if rawLat, err = rawLatency(ctx, conn, q, *rate, *latFor, pfs[0]); err != nil {
			return err
		}
		if err := purgeAll(); err != nil {
			return err
		}
		if ourLat, err = oursLatency(ctx, b, q, *rate, *latFor, pfs[0]); err != nil {
			return err
		}
	}

	fmt.Fprintln(os.Stderr, "middleware chain (no broker)…")
	chain := chainBench()

	printReport(os.Stdout, version, pid != 0, groups, rawLat, ourLat, pfs[0], chain)
	return nil
}

// ---- consuming ----

// fillQueue puts n persistent messages of body on q, outside any timing.
func fillQueue(ctx context.Context, b *mq.Broker, q string, body []byte, n int) error {
	p := b.Publisher("")
	defer p.Close()
	msgs := make([]mq.Message, 1000)
	for done := 0; done < n; done += len(msgs) {
		k := min(len(msgs), n-done)
		for i := range msgs[:k] {
			msgs[i] = mq.Message{Body: body}
		}
		if err := p.PublishBatch(ctx, q, msgs[:k]); err != nil {
			return err
		}
	}
	return nil
}

// rawConsume consumes n messages with amqp091-go on one goroutine:
// ackEvery 1 acks each, k > 1 acks with multiple=true every k deliveries
// (and the last), 0 consumes in auto-ack mode. The marks are taken at the
// first delivery and after the last one is settled.
func rawConsume(p *probe, conn *amqp.Connection, q string, n, prefetch, ackEvery int) (mark, mark, int, error) {
	var a, z mark
	ch, err := conn.Channel()
	if err != nil {
		return a, z, 0, err
	}
	defer ch.Close()
	if err := ch.Qos(prefetch, 0, false); err != nil {
		return a, z, 0, err
	}
	const tag = "bench-raw"
	ds, err := ch.Consume(q, tag, ackEvery == 0, false, false, false, nil)
	if err != nil {
		return a, z, 0, err
	}
	for i := 0; i < n; i++ {
		d, ok := <-ds
		if !ok {
			return a, z, 0, fmt.Errorf("raw consume ended after %d", i)
		}
		if i == 0 {
			a = p.mark()
		}
		if ackEvery > 0 && ((i+1)%ackEvery == 0 || i == n-1) {
			if err := d.Ack(ackEvery > 1); err != nil {
				return a, z, 0, err
			}
		}
	}
	z = p.mark()
	return a, z, n - 1, ch.Cancel(tag, false)
}

// oursConsume consumes n messages with the standard stack and a no-op
// handler; the marks are taken at the first handler call and the last.
func oursConsume(ctx context.Context, p *probe, b *mq.Broker, q string, n, prefetch int) (mark, mark, int, error) {
	var seen atomic.Int64
	var first, last atomic.Pointer[mark] // handlers may run on several goroutines
	var a, z mark
	done := make(chan struct{})
	h := mq.HandlerFunc(func(context.Context, *mq.Delivery) error {
		switch seen.Add(1) {
		case 1:
			m := p.mark()
			first.Store(&m)
		case int64(n):
			m := p.mark()
			last.Store(&m)
			close(done)
		}
		return nil
	})
	c, err := b.Consume(ctx, q, h, middleware.Standard(retry.Exponential(5, time.Second), middleware.WithoutDeclare()), mq.WithPrefetch(prefetch))
	if err != nil {
		return a, z, 0, err
	}
	defer c.Stop(context.Background())
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		return a, z, 0, fmt.Errorf("consumed only %d of %d", seen.Load(), n)
	}
	for first.Load() == nil { // the first call may still be taking its mark
		time.Sleep(time.Millisecond)
	}
	return *first.Load(), *last.Load(), n - 1, nil
}

// ---- publishing ----

// rawPublish is the baseline: one channel in confirm mode, up to window
// deferred confirms in flight (the oldest awaited when the window is
// full), round-robin over queues, the same properties the Publisher sets
// (a message id, a timestamp, mandatory).
func rawPublish(p *probe, conn *amqp.Connection, queues []string, body []byte, n, window int) (mark, mark, int, error) {
	var a, z mark
	ch, err := conn.Channel()
	if err != nil {
		return a, z, 0, err
	}
	defer ch.Close()
	if err := ch.Confirm(false); err != nil {
		return a, z, 0, err
	}
	inflight := make([]*amqp.DeferredConfirmation, 0, window)
	a = p.mark()
	for i := 0; i < n; i++ {
		dc, err := ch.PublishWithDeferredConfirm("", queues[i%len(queues)], true, false, amqp.Publishing{
			Body: body, DeliveryMode: amqp.Persistent, MessageId: mq.NewMessageID(), Timestamp: time.Now()})
		if err != nil {
			return a, z, 0, err
		}
		inflight = append(inflight, dc)
		if len(inflight) == window {
			if !inflight[0].Wait() {
				return a, z, 0, errors.New("raw publish nacked")
			}
			inflight = inflight[1:]
		}
	}
	for _, dc := range inflight {
		if !dc.Wait() {
			return a, z, 0, errors.New("raw publish nacked")
		}
	}
	z = p.mark()
	return a, z, n, nil
}

// oursPublish publishes n messages through one Publisher from workers
// goroutines, round-robin over queues.
func oursPublish(ctx context.Context, p *probe, b *mq.Broker, queues []string, body []byte, n, workers int) (mark, mark, int, error) {
	pub := b.Publisher("")
	defer pub.Close()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	a := p.mark()
	for range workers {
		wg.Go(func() {
			for {
				k := next.Add(1)
				if k > int64(n) {
					return
				}
				if err := pub.Publish(ctx, queues[int(k)%len(queues)], mq.Message{Body: body}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	z := p.mark()
	select {
	case err := <-errs:
		return a, z, 0, err
	default:
	}
	return a, z, n, nil
}

func oursBatch(ctx context.Context, p *probe, b *mq.Broker, q string, body []byte, n, size int) (mark, mark, int, error) {
	pub := b.Publisher("")
	defer pub.Close()
	msgs := make([]mq.Message, size)
	a := p.mark()
	for done := 0; done < n; done += size {
		k := min(size, n-done)
		for i := range msgs[:k] {
			msgs[i] = mq.Message{Body: body}
		}
		if err := pub.PublishBatch(ctx, q, msgs[:k]); err != nil {
			return a, mark{}, 0, err
		}
	}
	return a, p.mark(), n, nil
}

// ---- latency ----

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
	var wg sync.WaitGroup
	// The delivery channel closes with cch, so close it before waiting: on
	// an early return (a failed publish, paced's timeout) nothing has
	// cancelled the consumer, and a bare Wait would never return.
	defer func() { _ = cch.Close(); wg.Wait() }()
	wg.Go(func() {
		for d := range ds {
			rec.add(d.Headers)
			_ = d.Ack(false)
		}
	})
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

// ---- the chain alone ----

type chainResult struct {
	nsPerOp, allocs float64
}

// chainBench times the standard stack's middleware around a no-op handler,
// no broker involved, one fresh Delivery per message as the runtime makes.
func chainBench() chainResult {
	h := mqtest.Chain(mq.HandlerFunc(func(context.Context, *mq.Delivery) error { return nil }), nil,
		middleware.Stack(retry.Exponential(5, time.Second))...)
	raw := amqp.Delivery{Body: []byte("x"), MessageId: "m"}
	r := testing.Benchmark(func(b *testing.B) {
		b.ReportAllocs()
		ctx := context.Background()
		for b.Loop() {
			_ = h.Handle(ctx, mqtest.NewDelivery("q", raw, mqtest.Logger(quiet)))
		}
	})
	return chainResult{nsPerOp: float64(r.NsPerOp()), allocs: float64(r.AllocsPerOp())}
}

type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

// ---- the report ----

func printReport(w io.Writer, version string, haveBroker bool, groups []group, rawLat, ourLat latency, latPf int, chain chainResult) {
	fmt.Fprintf(w, "Measured %s on RabbitMQ %s (local), %s, %d CPUs shared with the broker; %d rounds, contestants alternating within each round; medians.\n\n",
		time.Now().UTC().Format("2006-01-02"), version, runtime.Version(), runtime.NumCPU(), *rounds)
	fmt.Fprint(w, `How to read it: each group's first row is its baseline, raw amqp091-go. msgs/s says how fast, but on a
small machine it follows whatever else runs there; the CPU columns say how much work a message cost, and
move far less: compare those first. *client* is this process's CPU time per message (user and system,
every thread: the library, amqp091-go, the garbage collector); *broker* is the RabbitMQ process's
(beam.smp, from /proc/<pid>/stat), which also counts any other client's work on that broker during the
round. Lower is cheaper. *vs raw* is the median of the per-round ratios of throughput to the baseline's run
in the same round, seconds apart: above 1.00x is faster. *allocs* are the client's heap allocations per
message, amqp091-go's own included (the raw rows show its share). Acking many deliveries at once
(multiple=true) saves the broker work; auto-ack acknowledges nothing, so it is a ceiling, not a target.
`)
	for _, g := range groups {
		fmt.Fprintf(w, "\n%s:\n\n", g.title)
		fmt.Fprintln(w, "| contestant | msgs/s | vs raw | client µs/msg | broker µs/msg | allocs/msg |")
		fmt.Fprintln(w, "| --- | ---: | ---: | ---: | ---: | ---: |")
		for i, r := range g.results {
			ratio := "baseline"
			if i > 0 {
				ratio = fmt.Sprintf("%.2fx", r.ratio)
			}
			br := "n/a"
			if haveBroker && !math.IsNaN(r.brokerCPU) {
				br = fmt.Sprintf("%.1f", r.brokerCPU)
			}
			fmt.Fprintf(w, "| %s | %.0f | %s | %.1f | %s | %.1f |\n", r.name, r.rate, ratio, r.clientCPU, br, r.allocs)
		}
		if g.note != "" {
			fmt.Fprintf(w, "\nThe %s.\n", g.note)
		}
	}
	if rawLat.p50 != 0 || ourLat.p50 != 0 {
		fmt.Fprintf(w, "\nPublish→handle latency at %d msg/s for %v (persistent, confirmed, prefetch %d): p50 %v, p99 %v (raw amqp091-go: %v, %v).\n",
			*rate, *latFor, latPf, ourLat.p50.Round(10*time.Microsecond), ourLat.p99.Round(10*time.Microsecond),
			rawLat.p50.Round(10*time.Microsecond), rawLat.p99.Round(10*time.Microsecond))
	}
	fmt.Fprintf(w, "\nThe standard middleware chain alone (no broker), per message: %.0f ns, %.0f allocs (the `Delivery`).\n", chain.nsPerOp, chain.allocs)
}
