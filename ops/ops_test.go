package ops

import (
	"errors"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/mq"
)

func TestSource(t *testing.T) {
	long := strings.Repeat("q", 256)
	cases := []struct {
		name     string
		headers  amqp.Table
		from     string
		want     string
		noted    bool
		noSource bool
	}{
		{"header", amqp.Table{mq.HeaderSourceQueue: "orders"}, "orders.dlq", "orders", false, false},
		{"header wins over suffix", amqp.Table{mq.HeaderSourceQueue: "billing"}, "orders.dlq", "billing", false, false},
		{"header on a queue without suffix", amqp.Table{mq.HeaderSourceQueue: "orders"}, "holding", "orders", false, false},
		{"header of bytes", amqp.Table{mq.HeaderSourceQueue: []byte("orders")}, "orders.parked", "orders", false, false},
		{"header naming a dlq", amqp.Table{mq.HeaderSourceQueue: "orders.dlq"}, "orders.dlq.dlq", "orders.dlq", false, false},
		{"no headers, dlq", nil, "orders.dlq", "orders", false, false},
		{"no headers, parked", amqp.Table{}, "orders.parked", "orders", false, false},
		{"wrong type", amqp.Table{mq.HeaderSourceQueue: int32(7)}, "orders.dlq", "orders", true, false},
		{"bytes not UTF-8", amqp.Table{mq.HeaderSourceQueue: []byte{0xff, 0xfe}}, "orders.dlq", "orders", true, false},
		{"table", amqp.Table{mq.HeaderSourceQueue: amqp.Table{"a": "b"}}, "orders.parked", "orders", true, false},
		{"nil value", amqp.Table{mq.HeaderSourceQueue: nil}, "orders.dlq", "orders", true, false},
		{"empty", amqp.Table{mq.HeaderSourceQueue: ""}, "orders.dlq", "orders", true, false},
		{"too long", amqp.Table{mq.HeaderSourceQueue: long}, "orders.dlq", "orders", true, false},
		{"itself", amqp.Table{mq.HeaderSourceQueue: "orders.dlq"}, "orders.dlq", "orders", true, false},
		{"no header, no suffix", nil, "holding", "", false, true},
		{"bad header, no suffix", amqp.Table{mq.HeaderSourceQueue: ""}, "holding", "", true, true},
		{"only a suffix", nil, ".dlq", "", false, true},
		{"itself, no suffix", amqp.Table{mq.HeaderSourceQueue: "holding"}, "holding", "", true, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, note, err := source(c.headers, c.from)
			if c.noSource {
				if !errors.Is(err, ErrNoSource) {
					t.Fatalf("source = %q, %v; want ErrNoSource", got, err)
				}
				if !strings.Contains(err.Error(), c.from) {
					t.Errorf("error %q does not name %q", err, c.from)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("source = %q, %v; want %q", got, err, c.want)
			}
			if (note != "") != c.noted {
				t.Errorf("note = %q, want one: %v", note, c.noted)
			}
		})
	}
}

func TestHeaderTime(t *testing.T) {
	at := time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)
	for _, v := range []any{at, at.Unix(), int32(at.Unix()), int(at.Unix()), at.Format(time.RFC3339), []byte(at.Format(time.RFC3339)), "1714979289"} {
		got := headerTime(amqp.Table{"k": v}, "k")
		if !got.Equal(at) {
			t.Errorf("headerTime(%T %v) = %v, want %v", v, v, got, at)
		}
	}
	for _, v := range []any{nil, "yesterday", 1.5, amqp.Table{}} {
		if got := headerTime(amqp.Table{"k": v}, "k"); !got.IsZero() {
			t.Errorf("headerTime(%T %v) = %v, want zero", v, v, got)
		}
	}
	if got := headerTime(nil, "k"); !got.IsZero() {
		t.Errorf("absent: %v", got)
	}
}

func TestPreview(t *testing.T) {
	cases := []struct {
		body []byte
		max  int
		want string
	}{
		{[]byte(`{"id":1}`), 256, `{"id":1}`},
		{[]byte("abcdef"), 3, "abc…"},
		{[]byte("line1\nline2\t!"), 256, "line1.line2.!"},
		{[]byte{0x00, 0xff, 'a'}, 256, "..a"},
		{[]byte("héllo"), 2, "h…"}, // é is two bytes: not cut in half
		{[]byte("日本語"), 4, "日…"},
		{nil, 10, ""},
		{[]byte("x"), -1, "…"},
	}
	for _, c := range cases {
		if got := Preview(c.body, c.max); got != c.want {
			t.Errorf("Preview(%q, %d) = %q, want %q", c.body, c.max, got, c.want)
		}
	}
}

func TestPeeked(t *testing.T) {
	at := time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)
	d := amqp.Delivery{
		MessageId: "m1", ContentType: "application/json", Redelivered: true, RoutingKey: "orders.dlq",
		Headers: amqp.Table{
			mq.HeaderAttempt:      int32(4),
			mq.HeaderReason:       string(mq.ReasonExhausted),
			mq.HeaderError:        []byte("db down"),
			mq.HeaderFailedAt:     at,
			mq.HeaderSourceQueue:  "orders",
			mq.HeaderReplayedFrom: "orders.parked",
			mq.HeaderReplayedAt:   at,
		},
		Body: []byte(`{"order":42}`),
	}
	p := peeked("orders.dlq", 3, d)
	if p.Queue != "orders.dlq" || p.Position != 3 || p.MessageId != "m1" || !p.Redelivered ||
		p.Attempt != 4 || p.Reason != "exhausted" || p.Error != "db down" || !p.FailedAt.Equal(at) ||
		p.SourceQueue != "orders" || p.ReplayedFrom != "orders.parked" || !p.ReplayedAt.Equal(at) ||
		p.Preview != `{"order":42}` || len(p.Headers) != 7 {
		t.Fatalf("peeked = %+v", p)
	}
	p.Headers["x"] = 1
	if _, ok := d.Headers["x"]; ok {
		t.Fatal("Peeked.Headers shares the delivery's table")
	}
	if p := peeked("q", 1, amqp.Delivery{}); p.Attempt != 1 || p.Headers != nil {
		t.Fatalf("no headers: %+v", p)
	}
}

// A queue name the wire cannot carry is refused before a channel is
// opened, by mq's validator (the name is a routing key on the default
// exchange): errors.Is matches mq.ErrInvalid and the error says it is the
// queue name.
func TestQueueNameTooLongIsInvalid(t *testing.T) {
	long := strings.Repeat("q", 256)
	_, err := Count(t.Context(), nil, long)
	if !errors.Is(err, mq.ErrInvalid) || !strings.Contains(err.Error(), "invalid queue name") || strings.Contains(err.Error(), long) {
		t.Errorf("Count: %v; want mq.ErrInvalid naming the queue name (without repeating 256 bytes)", err)
	}
	if _, err := Peek(t.Context(), nil, long, 1); !errors.Is(err, mq.ErrInvalid) {
		t.Errorf("Peek: %v; want mq.ErrInvalid", err)
	}
}
