//go:build integration

package integration

// Deliveries waiting in-process stay unacknowledged on the channel they
// came on. RabbitMQ keeps a channel's unacknowledged deliveries oldest
// first and walks them from the front on every single ack, so waiting ones
// at the front of the consuming channel make every healthy ack dearer (and,
// before this test, took their room from its prefetch window). The
// consumer moves its subscription to a fresh channel of the same connection
// once a few deliveries wait on the current one; these tests read the
// broker's own view of the channels with rabbitmqctl.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/internal/testenv"
	"github.com/acemq/acemq-go/middleware"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/retry"
	"github.com/acemq/acemq-go/topology"
)

// brokerChannels is what rabbitmqctl says of one connection's channels.
type brokerChannels struct {
	consuming int // unacknowledged on the channel that consumes the queue
	total     int // unacknowledged on every channel of that connection
	channels  int // channels of that connection
}

// channelsOf finds the channel consuming q and sums its connection's.
func channelsOf(t *testing.T, q string) (brokerChannels, bool) {
	t.Helper()
	ctx := testenv.Context(t, 30*time.Second)
	out, err := testenv.Rabbitmqctl(ctx, "", "list_consumers", "queue_name", "channel_pid")
	if err != nil {
		t.Fatal(err)
	}
	var consumer string
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == q {
			if consumer != "" {
				return brokerChannels{}, false // mid-move: two consumers for a moment
			}
			consumer = f[1]
		}
	}
	if consumer == "" {
		return brokerChannels{}, false
	}
	out, err = testenv.Rabbitmqctl(ctx, "", "list_channels", "pid", "connection", "messages_unacknowledged")
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		conn  string
		unack int
	}
	rows := map[string]row{}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) == 3 {
			n, _ := strconv.Atoi(f[2])
			rows[f[0]] = row{f[1], n}
		}
	}
	mine, ok := rows[consumer]
	if !ok {
		return brokerChannels{}, false
	}
	bc := brokerChannels{consuming: mine.unack}
	for _, r := range rows {
		if r.conn == mine.conn {
			bc.total += r.unack
			bc.channels++
		}
	}
	return bc, true
}

// channelsLook measures what one channelsOf costs here and now, on a
// queue nothing consumes: the windows that poll the broker's view scale
// with it.
func channelsLook(t *testing.T) time.Duration {
	t.Helper()
	probe := testenv.Name(t, "probe")
	start := time.Now()
	if _, ok := channelsOf(t, probe); ok {
		t.Fatalf("a consumer on %s, which does not exist", probe)
	}
	return time.Since(start)
}

// 60 messages fail once and wait in-process (4 s, or longer when the
// broker is slow to list: see below); healthy traffic flows meanwhile. The waiting ones must not sit on the channel that consumes:
// the broker shows at most a few of them there, all 60 on the connection's
// other channels, and every delivery is settled on its own channel (an ack
// on the wrong one would be refused, the channel closed and the message
// redelivered).
func TestLadderWaitingDeliveriesLeaveTheConsumingChannel(t *testing.T) {
	t.Parallel()
	for name, kind := range map[string]topology.QueueOption{"classic": topology.Classic(), "quorum": topology.Quorum()} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			waitingLeaveConsumingChannel(t, kind)
		})
	}
}

func waitingLeaveConsumingChannel(t *testing.T, kind topology.QueueOption) {
	b, _ := consBroker(t)
	// The broker's view is read with two rabbitmqctl calls, which take
	// 1.4-1.8 s each on a loaded machine: the wait the failing messages sit
	// in must outlast a few such reads, so it scales with what one costs
	// here and now (measured on the queue before anything consumes it).
	look := channelsLook(t)
	wait := max(4*time.Second, 4*look+time.Second).Round(time.Second)
	t.Logf("one look at the broker's channels takes %v: the failing messages wait %v", look.Round(time.Millisecond), wait)
	p := retry.Exponential(2, wait)
	q := testenv.Queue(t, b, p, kind)
	const failing, healthy = 60, 200
	var mu sync.Mutex
	calls := map[string][]int{}
	redelivered := 0
	h := mq.HandlerFunc(func(_ context.Context, d *mq.Delivery) error {
		mu.Lock()
		calls[d.MessageId] = append(calls[d.MessageId], d.Attempt())
		if d.Redelivered {
			redelivered++
		}
		mu.Unlock()
		if strings.HasPrefix(d.MessageId, "bad") && d.Attempt() == 1 {
			return errors.New("fails once")
		}
		return nil
	})
	c, err := b.Consume(testenv.Context(t, 20*time.Second), q, h, middleware.Standard(p),
		mq.WithConcurrency(4), mq.WithPrefetch(10))
	if err != nil {
		t.Fatal(err)
	}
	defer testenv.Stop(t, c)
	var msgs []mq.Message
	for i := range failing {
		msgs = append(msgs, mq.Message{Body: []byte("bad"), MessageId: fmt.Sprintf("bad-%d", i)})
	}
	testenv.Publish(t, b, q, msgs...)
	waiting := func() int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for id, a := range calls {
			if strings.HasPrefix(id, "bad") && len(a) == 1 {
				n++
			}
		}
		return n
	}
	testenv.Eventually(t, 3*time.Second, func() bool { return waiting() == failing }, "every failing message in its wait")
	testenv.Publish(t, b, q, consMessages("ok", healthy)...)

	var bc brokerChannels
	// Within the wait, two looks at the least: the first may start before
	// the healthy traffic's channel moves are over.
	testenv.Eventually(t, wait-look, func() bool {
		var ok bool
		bc, ok = channelsOf(t, q)
		return ok && waiting() == failing && bc.total >= failing
	}, "the broker shows the waiting deliveries")
	t.Logf("during the waits: %d unacknowledged on the consuming channel, %d on the connection's %d channels",
		bc.consuming, bc.total, bc.channels)
	if bc.consuming > 16+10 {
		t.Errorf("%d deliveries unacknowledged on the consuming channel while %d wait: the waiting ones sit in front of every healthy ack",
			bc.consuming, failing)
	}

	testenv.Eventually(t, wait+15*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		done := 0
		for id, a := range calls {
			if !strings.HasPrefix(id, "bad") || len(a) == 2 {
				done++
			}
		}
		return done == failing+healthy
	}, "every message handled to its end")
	testenv.Eventually(t, 5*time.Second+3*look, func() bool {
		bc, ok := channelsOf(t, q)
		return ok && bc.total == 0
	}, "every delivery acknowledged")
	mu.Lock()
	defer mu.Unlock()
	for id, a := range calls {
		want := "[1]"
		if strings.HasPrefix(id, "bad") {
			want = "[1 2]"
		}
		if got := fmt.Sprint(a); got != want {
			t.Errorf("%s: attempts %s, want %s", id, got, want)
		}
	}
	if redelivered != 0 {
		t.Errorf("%d redelivered calls: some settlement was refused", redelivered)
	}
	if n := testenv.Count(t, b, topology.DeadLetterQueue(q)); n != 0 {
		t.Errorf("%d in .dlq", n)
	}
}

// Many short waits in a row keep moving the subscription; the channels it
// leaves are used again, so their number stays bounded, and nothing is
// lost or settled twice.
func TestLadderMovingSubscriptionReusesChannels(t *testing.T) {
	t.Parallel()
	b, _ := consBroker(t)
	p := retry.Exponential(2, 200*time.Millisecond)
	q := testenv.Queue(t, b, p, topology.Classic())
	const n = 3000
	var mu sync.Mutex
	calls := map[string]int{}
	h := mq.HandlerFunc(func(_ context.Context, d *mq.Delivery) error {
		mu.Lock()
		calls[d.MessageId]++
		mu.Unlock()
		if d.Headers["fail"] == true && d.Attempt() == 1 {
			return errors.New("fails once")
		}
		return nil
	})
	c, err := b.Consume(testenv.Context(t, 20*time.Second), q, h, middleware.Standard(p),
		mq.WithConcurrency(4), mq.WithPrefetch(50))
	if err != nil {
		t.Fatal(err)
	}
	defer testenv.Stop(t, c)
	msgs := consMessages("m", n)
	for i := range msgs {
		if i%5 == 0 {
			msgs[i].Headers = amqp.Table{"fail": true}
		}
	}
	most := 0
	for i := 0; i < n; i += 500 {
		testenv.Publish(t, b, q, msgs[i:i+500]...)
		if bc, ok := channelsOf(t, q); ok {
			most = max(most, bc.channels)
		}
	}
	look := channelsLook(t)
	testenv.Eventually(t, 30*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		total := 0
		for _, k := range calls {
			total += k
		}
		return total == n+n/5
	}, "every message handled, the failing ones twice")
	testenv.Eventually(t, 5*time.Second+3*look, func() bool {
		bc, ok := channelsOf(t, q)
		return ok && bc.total == 0
	}, "every delivery acknowledged")
	t.Logf("at most %d channels on the consumer's connection", most)
	if most > 1+256/16+2 {
		t.Errorf("%d channels on the connection: the moved subscription's channels are not reused", most)
	}
	mu.Lock()
	defer mu.Unlock()
	for i, m := range msgs {
		want := 1
		if i%5 == 0 {
			want = 2
		}
		if calls[m.MessageId] != want {
			t.Errorf("%s: %d calls, want %d", m.MessageId, calls[m.MessageId], want)
		}
	}
}

// Stop while 40 deliveries wait across several channels: each wait is cut,
// its message carried back to the queue with its next attempt, and the
// original acknowledged on the channel it came on; nothing stays
// unacknowledged and nothing is lost or doubled.
func TestLadderStopCarriesWaitsFromEveryChannel(t *testing.T) {
	t.Parallel()
	b, _ := consBroker(t)
	// The first wait must outlast the looks at the broker before Stop: it
	// scales with what one look costs (see waitingLeaveConsumingChannel).
	look := channelsLook(t)
	wait := max(5*time.Second, 4*look+time.Second).Round(time.Second)
	t.Logf("one look at the broker's channels takes %v: the failing messages wait %v", look.Round(time.Millisecond), wait)
	p := retry.Exponential(3, wait)
	q := testenv.Queue(t, b, p, topology.Classic())
	const n = 40
	var mu sync.Mutex
	first := 0
	h := mq.HandlerFunc(func(_ context.Context, d *mq.Delivery) error {
		mu.Lock()
		if d.Attempt() == 1 {
			first++
		}
		mu.Unlock()
		return errors.New("fails")
	})
	c, err := b.Consume(testenv.Context(t, 20*time.Second), q, h, middleware.Standard(p), mq.WithConcurrency(2), mq.WithPrefetch(4))
	if err != nil {
		t.Fatal(err)
	}
	testenv.Publish(t, b, q, consMessages("w", n)...)
	testenv.Eventually(t, 5*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return first == n }, "every message in its first wait")
	var bc brokerChannels
	testenv.Eventually(t, wait-look, func() bool {
		var ok bool
		bc, ok = channelsOf(t, q)
		return ok && bc.total == n
	}, "the broker shows every waiting delivery")
	if bc.channels < 3 {
		t.Fatalf("%d waiting deliveries on %d channels: the subscription did not move", n, bc.channels)
	}
	if err := c.Stop(testenv.Context(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	got := testenv.GetAll(t, b, q)
	if len(got) != n {
		t.Fatalf("%d messages back in the queue after Stop, want %d", len(got), n)
	}
	ids := map[string]bool{}
	for _, d := range got {
		ids[d.MessageId] = true
		if a := mq.AttemptOf(d.Headers); a != 2 {
			t.Errorf("%s came back as attempt %d, want 2", d.MessageId, a)
		}
	}
	if len(ids) != n {
		t.Errorf("%d distinct messages of %d", len(ids), n)
	}
}
