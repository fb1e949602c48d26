//go:build integration

package integration

// How the library gives deliveries back, on the wire. RabbitMQ 4.3 counts
// a return toward a quorum queue's delivery limit (x-delivery-count) only
// when it says the message failed: basic.reject, or a channel that closed
// holding it. A basic.nack with requeue is a return that is nobody's
// failure and is not counted (x-acquired-count counts every return). So:
//
//   - a return that is the message's failure (a handler's mq.Requeue, a
//     panic outside every middleware) or a reject is a basic.reject, so
//     that 4.3 bounds a requeue loop; a set-aside that failed is the
//     library's failure and goes back with basic.nack (consumer_audit_test);
//   - a delivery never started when the consumer stops, and every message
//     an ops tool looked at, goes back with basic.nack, so that a deploy or
//     a peek does not bring it nearer its limit.
//
// The broker here is 3.10, which counts every return; the tests read what
// the client sent through a proxy (basic.reject is 60.90, basic.nack
// 60.120).

import (
	"context"
	"encoding/binary"
	"errors"
	"net/http/httptest"
	neturl "net/url"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/internal/testenv"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/ops"
	"github.com/acemq/acemq-go/retry"
	"github.com/acemq/acemq-go/topology"
)

const (
	methodReject = 90
	methodNack   = 120
)

func TestReturnsOfAFailedMessageAreRejects(t *testing.T) {
	t.Parallel()
	proxy, url := testenv.Proxy(t)
	b, _ := consBroker(t, url)
	q := testenv.Queue(t, b, retry.Policy{}, topology.DeadLetter())
	dlq := topology.DeadLetterQueue(q)
	var mu sync.Mutex
	calls := map[string]int{}
	var counts []any // x-delivery-count on the second deliveries
	c, err := b.Consume(testenv.Context(t, 20*time.Second), q, mq.HandlerFunc(func(_ context.Context, d *mq.Delivery) error {
		mu.Lock()
		calls[d.MessageId]++
		n := calls[d.MessageId]
		if n == 2 {
			counts = append(counts, d.Headers["x-delivery-count"])
		}
		mu.Unlock()
		switch {
		case d.MessageId == "requeue" && n == 1:
			return mq.Requeue(errors.New("not now"))
		case d.MessageId == "panic" && n == 1:
			panic("outside every middleware")
		case d.MessageId == "reject":
			return errors.New("bare error: rejected")
		}
		return nil
	}), mq.WithRequeuePause(10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer testenv.Stop(t, c)
	testenv.Publish(t, b, q, mq.Message{MessageId: "requeue"}, mq.Message{MessageId: "panic"}, mq.Message{MessageId: "reject"})
	testenv.WaitCount(t, b, dlq, 1, 10*time.Second)
	testenv.Eventually(t, 10*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return calls["requeue"] == 2 && calls["panic"] == 2
	}, "the requeued and the panicking message were not handled again")
	if r, n := proxy.Sent(60, methodReject), proxy.Sent(60, methodNack); r != 3 || n != 0 {
		t.Errorf("sent %d basic.reject and %d basic.nack, want 3 rejects (two requeues, one reject) and no nack", r, n)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, n := range counts {
		if n != int64(1) {
			t.Errorf("a second delivery carried x-delivery-count %v, want 1", n)
		}
	}
}

// Stop gives back what the consumer received and never started with one
// multiple basic.nack, before the channel closes: every one is back in the
// queue, and the broker was told it was nobody's failure.
func TestStopGivesBackWhatItNeverStarted(t *testing.T) {
	t.Parallel()
	proxy, url := testenv.Proxy(t)
	b, _ := consBroker(t, url)
	q := testenv.Queue(t, b, retry.Policy{})
	const n = 40
	started := make(chan struct{}, n)
	release := make(chan struct{})
	c, err := b.Consume(testenv.Context(t, 20*time.Second), q, mq.HandlerFunc(func(context.Context, *mq.Delivery) error {
		started <- struct{}{}
		<-release
		return nil
	}), mq.WithPrefetch(n))
	if err != nil {
		t.Fatal(err)
	}
	testenv.Publish(t, b, q, consMessages("unstarted", n)...)
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("nothing was handled")
	}
	testenv.Eventually(t, 10*time.Second, func() bool { m, _ := testenv.Ready(testenv.Context(t, 5*time.Second), b, q); return m == 0 },
		"the consumer did not receive the whole window")
	stopped := make(chan error, 1)
	go func() { stopped <- c.Stop(testenv.Context(t, 20*time.Second)) }()
	time.Sleep(100 * time.Millisecond) // the cancel is out; the handler still runs
	close(release)
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	testenv.WaitCount(t, b, q, n-1, 10*time.Second)
	if got := proxy.Sent(60, methodNack); got != 1 {
		t.Errorf("sent %d basic.nack at stop, want one multiple nack for the %d deliveries never started (what it misses goes back by the channel's close, counted as failed by RabbitMQ 4.3)", got, n-1)
	}
	if got := proxy.Sent(60, methodReject); got != 0 {
		t.Errorf("sent %d basic.reject at stop", got)
	}
}

// A peek gives the messages it looked at back with basic.nack before its
// channel closes, and they are back in place.
func TestPeekGivesBackWithANack(t *testing.T) {
	t.Parallel()
	proxy, url := testenv.Proxy(t)
	b, _ := consBroker(t, url)
	q := testenv.Queue(t, b, retry.Policy{}, topology.Classic())
	testenv.Publish(t, b, q, consMessages("peeked", 3)...)
	got, err := ops.Peek(testenv.Context(t, 10*time.Second), b, q, 2)
	if err != nil || len(got) != 2 {
		t.Fatalf("peek: %d, %v", len(got), err)
	}
	testenv.WaitCount(t, b, q, 3, 10*time.Second)
	if n := proxy.Sent(60, methodNack); n != 1 {
		t.Errorf("sent %d basic.nack, want one (multiple) giving both back", n)
	}
	if ms := testenv.GetAll(t, b, q); len(ms) != 3 || ms[0].MessageId != "peeked-0" || ms[1].MessageId != "peeked-1" {
		t.Errorf("after the peek the queue holds %d messages, first %v", len(ms), ms)
	}
}

// The console's look that stops at once (the first message shows a quorum
// queue's mark) has been sent more than it read: it cancels, reads the
// rest and gives everything back with one basic.nack, in place.
func TestConsoleLookGivesBackWhatItDidNotRead(t *testing.T) {
	t.Parallel()
	proxy, url := testenv.Proxy(t)
	b, _ := consBroker(t, url)
	q := testenv.Name(t)
	dlq := topology.DeadLetterQueue(q)
	testenv.Cleanup(t, dlq)
	if err := b.Declare(testenv.Context(t, 10*time.Second), topology.New().Queue(dlq, topology.Classic())); err != nil {
		t.Fatal(err)
	}
	msgs := consMessages("looked", 20)
	msgs[0].Headers = amqp.Table{"x-delivery-count": int64(1)} // the mark, as a quorum queue writes it
	testenv.Publish(t, b, dlq, msgs...)
	con, err := ops.NewConsole(b, ops.ConsoleOptions{Queues: []string{q}, Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer con.Close(context.Background())
	srv := httptest.NewServer(con)
	defer srv.Close()
	if _, page := consoleGet(t, srv.URL+"/queues/"+neturl.PathEscape(q)+"/dlq", ""); !strings.Contains(page, `id="quorum"`) {
		t.Fatalf("the look did not stop at the mark:\n%s", page)
	}
	testenv.WaitCount(t, b, dlq, 20, 10*time.Second)
	if n := proxy.Sent(60, methodNack); n != 1 {
		t.Errorf("sent %d basic.nack, want one (multiple) giving all back", n)
	}
	// The nack names the last of the 20 deliveries, multiple and requeue.
	if args := proxy.LastSent(60, methodNack); len(args) < 9 || binary.BigEndian.Uint64(args) != 20 || args[8] != 3 {
		t.Errorf("basic.nack arguments %x, want delivery tag 20, multiple and requeue", args)
	}
	got := testenv.GetAll(t, b, dlq)
	for i, d := range got {
		if d.MessageId != msgs[i].MessageId {
			t.Fatalf("after the look, message %d is %s, want %s: not back in place", i, d.MessageId, msgs[i].MessageId)
		}
	}
}
