//go:build integration

package integration

// The console's queue page on a .dlq of 10 000 dead letters against the
// real broker, and the same read done with raw amqp091-go in the same run;
// and the check that looking leaves the queue as it was.

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/internal/testenv"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/ops"
	"github.com/acemq/acemq-go/topology"
)

// consoleFill puts n dead letters in three groups into q's .dlq, as the
// library writes them, each with its own ids and numbers.
func consoleFill(t testing.TB, b *mq.Broker, q string, n int) {
	t.Helper()
	msgs := make([]mq.Message, n)
	at := time.Now().Add(-time.Hour).Truncate(time.Second)
	for i := range msgs {
		var text string
		switch i % 3 {
		case 0:
			text = fmt.Sprintf("order %d not found", 100000+i)
		case 1:
			text = fmt.Sprintf("card declined for payment %08x-0000-4000-8000-%012d", i, i)
		default:
			text = fmt.Sprintf("schema v%d: field amount at offset %d: expected a number", i%7, i*13)
		}
		msgs[i] = mq.Message{ContentType: "application/json",
			Body: []byte(fmt.Sprintf(`{"seq":%d,"customer":{"id":"c-%d","items":[1,2,3]}}`, i, i%500)),
			Headers: amqp.Table{mq.HeaderReason: string(mq.ReasonRejected), mq.HeaderError: text, mq.HeaderSourceQueue: q,
				mq.HeaderAttempt: int32(2), mq.HeaderFailedAt: at.Add(time.Duration(i) * time.Millisecond), "x-seq": int32(i)}}
	}
	for len(msgs) > 0 {
		k := min(len(msgs), 1000)
		testenv.Publish(t, b, topology.DeadLetterQueue(q), msgs[:k]...)
		msgs = msgs[k:]
	}
	testenv.WaitCount(t, b, topology.DeadLetterQueue(q), n, 30*time.Second)
}

// consoleQueue declares q (quorum, with its .dlq and .parked) for the
// test and deletes all three after.
func consoleQueue(t testing.TB, b *mq.Broker) string {
	t.Helper()
	q := testenv.Name(t)
	testenv.Cleanup(t, q, topology.DeadLetterQueue(q), topology.ParkedQueue(q))
	if err := b.Declare(testenv.Context(t, 10*time.Second), topology.New().Queue(q, topology.DeadLetter())); err != nil {
		t.Fatalf("declare %s: %v", q, err)
	}
	return q
}

// consoleServer serves a console of b with opts (logging to the test's
// log unless opts names a logger) on a local HTTP server; both are closed
// when the test ends, and an error closing the console fails it.
func consoleServer(t testing.TB, b *mq.Broker, opts ops.ConsoleOptions) *httptest.Server {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = testenv.Logger(t)
	}
	con, err := ops.NewConsole(b, opts)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(con)
	t.Cleanup(func() {
		srv.Close()
		if err := con.Close(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return srv
}

var groupLink = regexp.MustCompile(`href="(/queues/[^"]+/groups/[0-9a-f]+)"`)

// BenchmarkConsoleQueuePage10k is one GET of a .dlq's page with 10 000
// dead letters in it (browse them over AMQP, group, render), against raw
// amqp091-go reading the same 10 000 the same way (consume with a prefetch
// of 10 000, no ack, close the channel) and doing nothing with them, in
// the same run, alternating. Reported: milliseconds per page, the ratio,
// and CPU per page of this process and of the broker; and next-page-ms,
// the largest group's page right after, served from the snapshot.
func BenchmarkConsoleQueuePage10k(b *testing.B) {
	const n = 10000
	brk := testenv.Broker(b, mq.Config{Logger: testenv.Discard()})
	q := consoleQueue(b, brk)
	dlq := topology.DeadLetterQueue(q)
	consoleFill(b, brk, q, n)
	// A console of its own for every round, so each first page reads the
	// queue from the broker (a console keeps a snapshot for a few seconds).
	var srv *httptest.Server
	var con *ops.Console
	fresh := func() {
		if srv != nil {
			srv.Close()
			_ = con.Close(context.Background())
		}
		var err error
		con, err = ops.NewConsole(brk, ops.ConsoleOptions{Queues: []string{q}, Logger: testenv.Discard()})
		if err != nil {
			b.Fatal(err)
		}
		srv = httptest.NewServer(con)
	}
	defer func() {
		srv.Close()
		_ = con.Close(context.Background())
	}()
	conn, err := amqp.Dial(testenv.URL())
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	// The shared broker's CPU, where it can be read (0 where not); other
	// tests on the broker at the same time count too: an upper bound.
	pid, err := consBrokerPID(b)
	if err != nil {
		b.Logf("broker pid unknown, broker CPU not reported: %v", err)
	}
	brokerCPU := func() time.Duration {
		if pid == 0 {
			return 0
		}
		d, _ := consProcCPU(pid)
		return d
	}

	fetch := func(path, want string) string {
		code, body := consoleGet(b, srv.URL+path, "")
		if code != http.StatusOK || !strings.Contains(body, want) || strings.Contains(body, "Grouped the first") {
			b.Fatalf("GET %s: %d\n%s", path, code, body)
		}
		return body
	}
	queuePage := "/queues/" + url.PathEscape(q) + "/dlq"
	var groupPage string
	page := func() {
		body := fetch(queuePage, `<td class="num count">3334</td>`)
		if m := groupLink.FindStringSubmatch(body); m != nil {
			groupPage = m[1]
		}
	}
	// next is the page after it, a group's, served from the snapshot.
	next := func() { fetch(groupPage, `id="group-count">3334<`) }
	raw := func() {
		ch, err := conn.Channel()
		if err != nil {
			b.Fatal(err)
		}
		if _, err := ch.QueueDeclarePassive(dlq, false, false, false, false, nil); err != nil {
			b.Fatal(err)
		}
		if err := ch.Qos(n, 0, false); err != nil {
			b.Fatal(err)
		}
		ds, err := ch.Consume(dlq, "", false, false, false, false, nil)
		if err != nil {
			b.Fatal(err)
		}
		for range n {
			if _, ok := <-ds; !ok {
				b.Fatal("raw delivery stream ended")
			}
		}
		ch.Close()
	}
	// After a look the broker requeues the messages; wait until all are
	// ready again before the next, so each round reads all 10 000.
	settle := func() { testenv.WaitCount(b, brk, dlq, n, 10*time.Second) }

	var pageT, rawT, nextT, pageCPU, rawCPU, pageBroker, rawBroker time.Duration
	timed := func(f func(), wall, cpu, broker *time.Duration) {
		b.StopTimer()
		settle()
		if wall == &pageT {
			fresh()
		}
		b.StartTimer()
		t0, c0, k0 := time.Now(), testenv.CPU(), brokerCPU()
		f()
		*wall += time.Since(t0)
		*cpu += testenv.CPU() - c0
		*broker += brokerCPU() - k0
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%2 == 0 {
			timed(raw, &rawT, &rawCPU, &rawBroker)
			timed(page, &pageT, &pageCPU, &pageBroker)
		} else {
			timed(page, &pageT, &pageCPU, &pageBroker)
			timed(raw, &rawT, &rawCPU, &rawBroker)
		}
		b.StopTimer()
		settle()
		b.StartTimer()
		if groupPage == "" {
			b.Fatal("no group link on the queue's page")
		}
		t0 := time.Now()
		next() // the page before was the queue's own, on this console
		nextT += time.Since(t0)
	}
	b.StopTimer()
	settle()
	per := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(b.N) }
	b.ReportMetric(per(pageT), "page-ms")
	b.ReportMetric(per(rawT), "raw-ms")
	b.ReportMetric(per(nextT), "next-page-ms")
	b.ReportMetric(pageT.Seconds()/rawT.Seconds(), "page/raw")
	b.ReportMetric(per(pageCPU), "page-cpu-ms")
	b.ReportMetric(per(rawCPU), "raw-cpu-ms")
	if pid != 0 {
		b.ReportMetric(per(pageBroker), "page-broker-cpu-ms")
		b.ReportMetric(per(rawBroker), "raw-broker-cpu-ms")
	}
	b.ReportMetric(0, "ns/op")
}

// Looking at a queue leaves it as it was: every message back, in its
// order; a queue larger than the scan cap says so on its page.
func TestConsoleLooksInPlace(t *testing.T) {
	testenv.NoLeaks(t)
	b := testenv.Broker(t, mq.Config{})
	q := consoleQueue(t, b)
	dlq := topology.DeadLetterQueue(q)
	consoleFill(t, b, q, 300)
	srv := consoleServer(t, b, ops.ConsoleOptions{Queues: []string{q}, MaxScan: 200})
	for range 3 {
		code, body := consoleGet(t, srv.URL+"/queues/"+url.PathEscape(q)+"/dlq", "")
		if code != http.StatusOK || !strings.Contains(body, "Grouped the first 200 of 300 messages.") {
			t.Fatalf("page: %d\n%s", code, body)
		}
	}
	testenv.WaitCount(t, b, dlq, 300, 10*time.Second)
	got := testenv.GetAll(t, b, dlq)
	if len(got) != 300 {
		t.Fatalf("%d messages in %s after three looks, want 300", len(got), dlq)
	}
	for i, d := range got {
		if d.Headers["x-seq"] != int32(i) {
			t.Fatalf("message %d of %s is x-seq %v: looking reordered the queue", i, dlq, d.Headers["x-seq"])
		}
	}
}

// A .dlq that is a quorum queue (declared so by hand, or by a vhost whose
// default queue type is quorum) is not read: up to RabbitMQ 4.2 the
// broker refuses the look's consumer (a global prefetch) before it sends
// anything; 4.3 takes it, does not count the look's return, and the
// x-acquired-count its messages come back with stops the second look.
// Either way the page says why (see also console_quorum_test.go).
func TestConsoleQuorumDLQ(t *testing.T) {
	testenv.NoLeaks(t)
	b := testenv.Broker(t, mq.Config{})
	q := testenv.Name(t)
	dlq := topology.DeadLetterQueue(q)
	testenv.Cleanup(t, dlq)
	if err := b.Declare(testenv.Context(t, 10*time.Second), topology.New().Queue(dlq, topology.Quorum())); err != nil {
		t.Fatal(err)
	}
	testenv.Publish(t, b, dlq, mq.Message{Body: []byte("x"), Headers: amqp.Table{mq.HeaderReason: "rejected", mq.HeaderError: "boom"}})
	look := func() string {
		con, err := ops.NewConsole(b, ops.ConsoleOptions{Queues: []string{q}, Logger: testenv.Logger(t)})
		if err != nil {
			t.Fatal(err)
		}
		defer con.Close(context.Background())
		srv := httptest.NewServer(con)
		defer srv.Close()
		testenv.WaitCount(t, b, dlq, 1, 5*time.Second)
		_, body := consoleGet(t, srv.URL+"/queues/"+url.PathEscape(q)+"/dlq", "")
		return body
	}
	switch page := look(); {
	case strings.Contains(page, `id="quorum"`) && !strings.Contains(page, `<td class="num count">`):
	case strings.Contains(page, `<td class="num count">1</td>`):
		t.Logf("the first look read the quorum .dlq (RabbitMQ 4.3 takes a global prefetch there)")
	default:
		t.Fatalf("first look:\n%s", page)
	}
	if page := look(); !strings.Contains(page, `id="quorum"`) || strings.Contains(page, `<td class="num count">`) {
		t.Fatalf("second look on a quorum .dlq: no warning\n%s", page)
	}
	testenv.WaitCount(t, b, dlq, 1, 5*time.Second)
}
