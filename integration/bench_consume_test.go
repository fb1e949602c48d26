//go:build integration

package integration

// Consume throughput of the standard stack (recover, retry ladder, parking,
// logging at info, declare-on-start) on a no-op handler, against raw
// amqp091-go manual-ack consumption with the same prefetch, in the same run
// and on the same queue. Issue 4's target: at least 0.9x.
//
//	go test -tags integration -run '^$' -bench BenchmarkConsume -benchtime 4x ./integration/

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/internal/testenv"
	"github.com/acemq/acemq-go/middleware"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/retry"
	"github.com/acemq/acemq-go/topology"
)

// consBenchRound is how many messages one timed consumption takes.
const consBenchRound = 5000

func BenchmarkConsume(b *testing.B) {
	for _, prefetch := range []int{10, 100} {
		b.Run(fmt.Sprintf("prefetch=%d", prefetch), func(b *testing.B) { consBenchConsume(b, prefetch) })
	}
}

func consBenchConsume(b *testing.B, prefetch int) {
	brk := testenv.Broker(b, mq.Config{Logger: consBenchInfo})
	p := retry.Exponential(5, time.Second)
	q := testenv.Queue(b, brk, p, topology.Classic())
	conn, err := amqp.Dial(testenv.URL())
	if err != nil {
		b.Fatalf("raw dial: %v", err)
	}
	defer conn.Close()
	// The fill goes through a connection of its own: the broker throttles a
	// connection that publishes hard (credit flow), and the consumer's acks
	// must not queue behind that, for either contestant.
	filler := testenv.Broker(b, mq.Config{Logger: consBenchInfo})
	pub := filler.Publisher("")
	defer pub.Close()
	msgs := consBenchMessages(consBenchRound)
	fill := func() {
		for i := range msgs {
			msgs[i].MessageId = "" // a fresh id each round
		}
		if err := pub.PublishBatch(testenv.Context(b, time.Minute), q, msgs); err != nil {
			b.Fatalf("fill: %v", err)
		}
	}

	// raw consumes one round with amqp091-go: one goroutine, ack each.
	raw := func() (time.Duration, time.Duration) {
		ch, err := conn.Channel()
		if err != nil {
			b.Fatal(err)
		}
		defer ch.Close()
		if err := ch.Qos(prefetch, 0, false); err != nil {
			b.Fatal(err)
		}
		dels, err := ch.Consume(q, "goit-bench-raw", false, false, false, false, nil)
		if err != nil {
			b.Fatal(err)
		}
		var start time.Time
		var cpu0 time.Duration
		for i := range consBenchRound {
			d, ok := <-dels
			if !ok {
				b.Fatal("raw delivery stream ended")
			}
			if i == 0 {
				start, cpu0 = time.Now(), testenv.CPU()
			}
			if err := d.Ack(false); err != nil {
				b.Fatal(err)
			}
		}
		took, cpu := time.Since(start), testenv.CPU()-cpu0
		if err := ch.Cancel("goit-bench-raw", false); err != nil {
			b.Fatal(err)
		}
		return took, cpu
	}

	// ours consumes one round with mq.Consume and the standard stack.
	ours := func() (time.Duration, time.Duration) {
		return consBenchStandard(b, brk, q, p, prefetch, consBenchRound)
	}

	brokerCPU := consBenchBrokerCPU(b)
	var rawTotal, oursTotal, rawCPU, oursCPU, rawBroker, oursBroker time.Duration
	var ratios []float64 // per round: raw time / our time, both taken back to back
	timed := func(run func() (time.Duration, time.Duration), total, cpuTotal, brokerTotal *time.Duration) time.Duration {
		b.StopTimer()
		fill()
		runtime.GC() // the fill's garbage is not the consumer's
		b.StartTimer()
		b0 := brokerCPU()
		took, cpu := run()
		*brokerTotal += brokerCPU() - b0
		*total += took
		*cpuTotal += cpu
		return took
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		// Alternate the order, so drift in the broker hits both alike.
		var r, o time.Duration
		if i%2 == 0 {
			r = timed(raw, &rawTotal, &rawCPU, &rawBroker)
			o = timed(ours, &oursTotal, &oursCPU, &oursBroker)
		} else {
			o = timed(ours, &oursTotal, &oursCPU, &oursBroker)
			r = timed(raw, &rawTotal, &rawCPU, &rawBroker)
		}
		ratios = append(ratios, r.Seconds()/o.Seconds())
	}
	b.StopTimer()
	if n, err := testenv.Ready(testenv.Context(b, 10*time.Second), brk, q); err != nil || n != 0 {
		b.Fatalf("%d messages left in the queue (%v)", n, err)
	}
	msgs64 := float64(b.N * consBenchRound)
	rawRate := msgs64 / rawTotal.Seconds()
	oursRate := msgs64 / oursTotal.Seconds()
	b.ReportMetric(rawRate, "raw-msgs/s")
	b.ReportMetric(oursRate, "acemq-msgs/s")
	// The median of the paired rounds: a burst of load from elsewhere on the
	// machine spoils one round, not the ratio.
	slices.Sort(ratios)
	b.ReportMetric(ratios[len(ratios)/2], "ratio")
	b.ReportMetric(oursRate/rawRate, "ratio-of-totals")
	// The client's own CPU per message (this process, user and system, from
	// the first message to the last): what the library costs per message,
	// whatever the broker's speed.
	b.ReportMetric(float64(rawCPU.Microseconds())/msgs64, "raw-cpu-µs/msg")
	b.ReportMetric(float64(oursCPU.Microseconds())/msgs64, "acemq-cpu-µs/msg")
	// The broker's CPU per message (its whole process over each round,
	// other clients' work included): what each way of consuming costs it.
	b.ReportMetric(float64(rawBroker.Microseconds())/msgs64, "raw-broker-µs/msg")
	b.ReportMetric(float64(oursBroker.Microseconds())/msgs64, "acemq-broker-µs/msg")
	b.ReportMetric(0, "ns/op")
}

// consBenchBrokerCPU returns a reader of the broker process's CPU time
// (consBrokerPID, consProcCPU): the broker shares this machine. A broker
// it cannot find fails the benchmark.
func consBenchBrokerCPU(b *testing.B) func() time.Duration {
	b.Helper()
	pid, err := consBrokerPID(b)
	if err != nil {
		b.Fatalf("the broker's pid: %v", err)
	}
	return func() time.Duration {
		d, err := consProcCPU(pid)
		if err != nil {
			b.Fatalf("broker CPU: %v", err)
		}
		return d
	}
}

// consBrokerPID is the pid of the broker's VM, as rabbitmqctl reports it.
func consBrokerPID(tb testing.TB) (int, error) {
	out, err := testenv.Rabbitmqctl(testenv.Context(tb, time.Minute), "", "eval", "os:getpid().")
	if err != nil {
		return 0, err
	}
	pid, err := strconv.Atoi(strings.Trim(strings.TrimSpace(out), `"`))
	if err != nil {
		return 0, fmt.Errorf("rabbitmqctl eval os:getpid(): %q", out)
	}
	return pid, nil
}

// consProcCPU is the CPU time process pid has used so far: utime+stime,
// fields 14 and 15 of /proc/<pid>/stat (after the command name, which is
// in parentheses and may hold spaces).
func consProcCPU(pid int) (time.Duration, error) {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	s := string(raw)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %q", pid, raw)
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %q", pid, raw)
	}
	return time.Duration(ut+st) * 10 * time.Millisecond, nil // USER_HZ is 100
}

// consBenchInfo is the benchmarks' logger: the standard stack logs at
// info, to nowhere.
var consBenchInfo = slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelInfo}))

// consBenchMessages makes n small transient messages, a benchmark's fill.
func consBenchMessages(n int) []mq.Message {
	msgs := make([]mq.Message, n)
	for i := range msgs {
		msgs[i] = mq.Message{Body: []byte(`{"bench":true}`), DeliveryMode: amqp.Transient, ContentType: "application/json"}
	}
	return msgs
}

// consBenchStandard consumes one round of n messages from q on brk, with
// the standard stack for p and the given prefetch, on a handler that does
// nothing, and returns the wall and CPU time from the first handler call
// to the last.
func consBenchStandard(b *testing.B, brk *mq.Broker, q string, p retry.Policy, prefetch, n int) (time.Duration, time.Duration) {
	var calls atomic.Int64
	var start time.Time
	var cpu0 time.Duration
	done := make(chan struct{})
	h := mq.HandlerFunc(func(context.Context, *mq.Delivery) error {
		switch calls.Add(1) {
		case 1:
			start, cpu0 = time.Now(), testenv.CPU()
		case int64(n):
			close(done)
		}
		return nil
	})
	c, err := brk.Consume(testenv.Context(b, time.Minute), q, h, middleware.Standard(p), mq.WithPrefetch(prefetch))
	if err != nil {
		b.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(time.Minute):
		b.Fatal("the round did not finish")
	}
	took, cpu := time.Since(start), testenv.CPU()-cpu0
	if err := c.Stop(testenv.Context(b, 10*time.Second)); err != nil {
		b.Fatal(err)
	}
	return took, cpu
}
