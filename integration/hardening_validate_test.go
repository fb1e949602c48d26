//go:build integration

package integration

// Issue 11, item 1: everything a frame cannot carry, or that amqp091-go's
// reader would refuse, is refused at the call (errors.Is(err,
// mq.ErrInvalid), naming the field and the limit), with the connection
// untouched. Helpers of the hardening suites start with hard.

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/internal/tcpproxy"
	"github.com/acemq/acemq-go/internal/testenv"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/ops"
	"github.com/acemq/acemq-go/topology"
)

// hardBroker is a broker through a proxy of the test's own (so its
// connections are counted), logging to a recorder.
func hardBroker(t *testing.T, cfg mq.Config) (*mq.Broker, *tcpproxy.Proxy, *testenv.LogRecorder) {
	t.Helper()
	p, u := testenv.Proxy(t)
	lg := testenv.NewLogRecorder(t, "acemq.message.settled")
	cfg.URLs, cfg.Logger = []string{u}, lg.Logger()
	if cfg.ConnectionName == "" {
		cfg.ConnectionName = testenv.Name(t)
	}
	return testenv.Broker(t, cfg), p, lg
}

// hardNest returns a value nested depth tables deep: a table directly in
// the headers is depth 1.
func hardNest(depth int) any {
	var v any = "leaf"
	for range depth {
		v = amqp.Table{"n": v}
	}
	return v
}

func hardBigTable(n int) amqp.Table {
	t := make(amqp.Table, n)
	for i := range n {
		t["k"+strconv.Itoa(i)] = int32(i)
	}
	return t
}

// The invalid inputs of item 1, ten of each: every one refused with
// ErrInvalid naming its field, and not one connection lost (the proxy saw
// one connection, the log no loss).
func TestHardeningInvalidInputsCostNoConnection(t *testing.T) {
	b, proxy, lg := hardBroker(t, mq.Config{})
	ctx := testenv.Context(t, 60*time.Second)
	q := coreQueue(t, b, nil)
	pub := b.Publisher("")
	defer pub.Close()
	long := strings.Repeat("x", 256)
	deep := amqp.Table{"deep": hardNest(32 + 1)}
	cases := []struct {
		name, field string
		key         string
		m           mq.Message
	}{
		{"routing key", "routing key", long, mq.Message{}},
		{"message id", "message id", q, mq.Message{MessageId: long}},
		{"correlation id", "correlation id", q, mq.Message{CorrelationId: long}},
		{"reply-to", "reply-to", q, mq.Message{ReplyTo: long}},
		{"type", "type", q, mq.Message{Type: long}},
		{"user id", "user id", q, mq.Message{UserId: long}},
		{"app id", "app id", q, mq.Message{AppId: long}},
		{"content type", "content type", q, mq.Message{ContentType: long}},
		{"content encoding", "content encoding", q, mq.Message{ContentEncoding: long}},
		{"expiration not a number", "expiration", q, mq.Message{Expiration: "soon"}},
		{"header key", "header key", q, mq.Message{Headers: amqp.Table{long: "v"}}},
		{"nested header key", "header \"outer\" key", q, mq.Message{Headers: amqp.Table{"outer": amqp.Table{long: 1}}}},
		{"headers over frame_max", "message properties", q, mq.Message{Headers: amqp.Table{"big": strings.Repeat("b", 200_000)}}},
		{"headers nested too deep", "nests tables and arrays 33 deep", q, mq.Message{Headers: deep}},
		{"table with too many entries", "has 8193 entries", q, mq.Message{Headers: amqp.Table{"t": hardBigTable(8192 + 1)}}},
		{"array with too many elements", "has 8193 elements", q, mq.Message{Headers: amqp.Table{"a": make([]any, 8192+1)}}},
		{"unsupported type", "header \"u\"", q, mq.Message{Headers: amqp.Table{"u": uint64(1)}}},
	}
	for _, c := range cases {
		for i := range 10 {
			err := pub.Publish(ctx, c.key, c.m)
			if !errors.Is(err, mq.ErrInvalid) {
				t.Fatalf("%s (%d): %v; want ErrInvalid", c.name, i, err)
			}
			if !strings.Contains(err.Error(), c.field) {
				t.Errorf("%s: the error does not name %q: %v", c.name, c.field, err)
			}
		}
		// The same, in a batch beside a valid message: only the invalid one fails.
		err := pub.PublishBatch(ctx, c.key, []mq.Message{c.m, {Body: []byte("fine")}})
		var be *mq.BatchError
		if !errors.As(err, &be) || !errors.Is(be.Errs[0], mq.ErrInvalid) {
			t.Fatalf("%s in a batch: %v; want the first to be ErrInvalid", c.name, err)
		}
		if c.key == q && be.Errs[1] != nil {
			t.Errorf("%s in a batch: the valid message failed too: %v", c.name, be.Errs[1])
		}
	}
	// Exchange names and queue names in every call.
	for i := range 10 {
		if err := b.Publisher(long).Publish(ctx, "k", mq.Message{}); !errors.Is(err, mq.ErrInvalid) {
			t.Fatalf("publisher on a 256-byte exchange (%d): %v; want ErrInvalid", i, err)
		}
		if _, err := b.QueueExists(ctx, long); !errors.Is(err, mq.ErrInvalid) {
			t.Fatalf("QueueExists: %v; want ErrInvalid", err)
		}
		if _, err := testenv.Ready(ctx, b, long); !errors.Is(err, mq.ErrInvalid) {
			t.Fatalf("ops.Count: %v; want ErrInvalid", err)
		}
		if _, err := b.DeleteQueue(ctx, long); !errors.Is(err, mq.ErrInvalid) {
			t.Fatalf("DeleteQueue: %v; want ErrInvalid", err)
		}
		if _, err := b.Consume(ctx, long, mq.HandlerFunc(func(context.Context, *mq.Delivery) error { return nil })); !errors.Is(err, mq.ErrInvalid) {
			t.Fatalf("Consume: %v; want ErrInvalid", err)
		}
		if _, err := ops.Count(ctx, b, long); !errors.Is(err, mq.ErrInvalid) {
			t.Fatalf("ops.Count: %v; want ErrInvalid", err)
		}
		if _, err := ops.Peek(ctx, b, long, 1); !errors.Is(err, mq.ErrInvalid) {
			t.Fatalf("ops.Peek: %v; want ErrInvalid", err)
		}
		if _, err := ops.Replay(ctx, b, long, ops.ReplayOptions{}); !errors.Is(err, mq.ErrInvalid) {
			t.Fatalf("ops.Replay: %v; want ErrInvalid", err)
		}
		err := b.Declare(ctx, topology.New().Queue(testenv.Name(t, "never"), topology.Classic(), topology.Args(map[string]any{"x-deep": hardNest(32 + 1)})))
		if !errors.Is(err, mq.ErrInvalid) {
			t.Fatalf("Declare with arguments nested 33 deep: %v; want ErrInvalid", err)
		}
	}
	// The connection is the one it was, and it works.
	if err := pub.Publish(ctx, q, mq.Message{Body: []byte("after")}); err != nil {
		t.Fatalf("a valid publish after the invalid ones: %v", err)
	}
	if n := lg.Count(mq.EventConnectionLost); n != 0 {
		t.Errorf("%d connection losses for invalid input; want 0: %v", n, lg.All(mq.EventConnectionLost)[0])
	}
	if n := proxy.Accepted(); n != 1 {
		t.Errorf("the proxy saw %d connections; want 1", n)
	}
	t.Logf("%d kinds of invalid input, ten of each (and in batches), plus names in 9 calls: %d connection(s), %d lost",
		len(cases), proxy.Accepted(), lg.Count(mq.EventConnectionLost))
}

// At the limits exactly, everything is sent and read back intact by a
// consumer of this library; a Go int that 32 bits do not hold arrives
// whole.
func TestHardeningLimitsRoundTrip(t *testing.T) {
	b, _, lg := hardBroker(t, mq.Config{})
	ctx := testenv.Context(t, 30*time.Second)
	q := coreQueue(t, b, nil)
	pub := b.Publisher("")
	defer pub.Close()
	max := strings.Repeat("m", 255)
	m := mq.Message{MessageId: max, CorrelationId: max, ReplyTo: max, Type: max, AppId: max, ContentType: max, ContentEncoding: max,
		Expiration: "4294967295",
		Headers: amqp.Table{
			max:     "key of 255 bytes",
			"deep":  hardNest(32),
			"big":   int(5_000_000_000),
			"neg":   int(-5_000_000_000),
			"small": int(7),
			"arr":   []any{int(1 << 40), "s"},
		}}
	if err := pub.Publish(ctx, q, m); err != nil {
		t.Fatalf("publish at the limits: %v", err)
	}
	got := make(chan mq.Delivery, 1)
	c, err := b.Consume(ctx, q, mq.HandlerFunc(func(_ context.Context, d *mq.Delivery) error {
		select {
		case got <- *d:
		default:
		}
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer testenv.Stop(t, c)
	var d mq.Delivery
	select {
	case d = <-got:
	case <-ctx.Done():
		t.Fatalf("not delivered: %v (events: %s)", ctx.Err(), lg.Events())
	}
	if d.MessageId != max || d.AppId != max || d.ContentEncoding != max {
		t.Error("a 255-byte property did not arrive intact")
	}
	if v, ok := d.Headers["big"].(int64); !ok || v != 5_000_000_000 {
		t.Errorf("int 5 000 000 000 arrived as %T %v", d.Headers["big"], d.Headers["big"])
	}
	if v, ok := d.Headers["neg"].(int64); !ok || v != -5_000_000_000 {
		t.Errorf("int -5 000 000 000 arrived as %T %v", d.Headers["neg"], d.Headers["neg"])
	}
	if v, ok := d.Headers["small"].(int32); !ok || v != 7 {
		t.Errorf("int 7 arrived as %T %v; want int32 (written as before)", d.Headers["small"], d.Headers["small"])
	}
	if arr, ok := d.Headers["arr"].([]any); !ok || len(arr) != 2 || arr[0] != int64(1<<40) {
		t.Errorf("array arrived as %#v", d.Headers["arr"])
	}
	v := d.Headers["deep"]
	for i := range 32 {
		tb, ok := v.(amqp.Table)
		if !ok {
			t.Fatalf("depth %d is a %T", i+1, v)
		}
		v = tb["n"]
	}
	if v != "leaf" {
		t.Errorf("the leaf at depth 32 is %v", v)
	}
	if n := lg.Count(mq.EventConnectionLost); n != 0 {
		t.Errorf("%d connection losses", n)
	}
}

// Item 8: a publish whose context has already ended sends nothing, every
// time (the landed code sent about half of them).
func TestHardeningCancelledContextSendsNothing(t *testing.T) {
	b, _, _ := hardBroker(t, mq.Config{})
	ctx := testenv.Context(t, 30*time.Second)
	q := coreQueue(t, b, nil)
	pub := b.Publisher("")
	defer pub.Close()
	if err := pub.Publish(ctx, q, mq.Message{MessageId: "warm"}); err != nil { // the channel is open
		t.Fatal(err)
	}
	if _, err := b.DeleteQueue(ctx, q); err != nil {
		t.Fatal(err)
	}
	q = coreQueue(t, b, nil)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for i := range 200 {
		if err := pub.Publish(cancelled, q, mq.Message{}); !errors.Is(err, context.Canceled) {
			t.Fatalf("publish %d with a cancelled context: %v; want context.Canceled", i, err)
		}
	}
	if err := pub.PublishBatch(cancelled, q, make([]mq.Message, 50)); !errors.Is(err, context.Canceled) {
		t.Fatalf("batch with a cancelled context: %v", err)
	}
	// A marker published after them: once it is in, anything sent before it is too.
	if err := pub.Publish(ctx, q, mq.Message{MessageId: "marker"}); err != nil {
		t.Fatal(err)
	}
	if n := testenv.Count(t, b, q); n != 1 {
		t.Errorf("the queue holds %d messages; want only the marker (nothing sent with a cancelled context)", n)
	}
}

// Item 8: a connection.blocked the broker sends right after open (a
// connection opened during a resource alarm) is seen, every time: the
// landed code registered its listener late and amqp091-go drops
// notifications nobody listens for.
func TestHardeningBlockedRightAfterOpen(t *testing.T) {
	proxy, u := testenv.Proxy(t)
	proxy.BlockAfterHandshake("memory alarm (injected)")
	missed := 0
	const runs = 20
	for i := range runs {
		b := mq.New(mq.Config{URLs: []string{u}, ConnectionName: testenv.Name(t), Logger: testenv.Discard()})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := b.Start(ctx); err != nil {
			cancel()
			t.Fatalf("start %d: %v", i, err)
		}
		if !testenv.Poll(500*time.Millisecond, func() bool { return testenv.Blocked(b) }) {
			missed++
		}
		_ = b.Close(ctx)
		cancel()
	}
	if missed > 0 {
		t.Errorf("%d of %d connections missed the connection.blocked sent right after open", missed, runs)
	}
}
