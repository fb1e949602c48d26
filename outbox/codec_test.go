package outbox

import (
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/mq"
)

// Every property and every type an AMQP table carries comes back from the
// properties column as it went in, Go type included.
func TestPropsRoundTrip(t *testing.T) {
	ts := time.Date(2026, 12, 1, 23, 0, 0, 123456789, time.UTC)
	m := mq.Message{
		ContentType: "application/json", ContentEncoding: "gzip", DeliveryMode: amqp.Transient, Priority: 7,
		CorrelationId: "corr", ReplyTo: "replies", Expiration: "60000", MessageId: "id-1", Timestamp: ts,
		Type: "order.placed", UserId: "guest", AppId: "shop",
		Headers: amqp.Table{
			"s": "text", "b": []byte{0, 1, 2}, "empty": []byte{}, "t": true, "nil": nil,
			"i8": int8(-8), "i16": int16(-16), "i32": int32(-32), "i64": int64(math.MinInt64), "int": 42,
			"u8": uint8(255), "u16": uint16(65535), "u32": uint32(math.MaxUint32),
			"f32": float32(1.1), "f64": math.Pi, "inf": math.Inf(-1),
			"time": ts, "dec": amqp.Decimal{Scale: 2, Value: 12345},
			"table": amqp.Table{"nested": amqp.Table{"deep": int32(1)}, "list": []any{"a", int16(2), []any{false}}},
			"list":  []any{},
		},
	}
	if got := roundTrip(t, m); !reflect.DeepEqual(got, m) {
		t.Fatalf("round trip changed the message:\n got %#v\nwant %#v", got, m)
	}
}

// NaN survives too (it is not equal to itself, so apart).
func TestPropsNaN(t *testing.T) {
	got := roundTrip(t, mq.Message{Headers: amqp.Table{"nan": math.NaN()}})
	if f, ok := got.Headers["nan"].(float64); !ok || !math.IsNaN(f) {
		t.Fatalf("nan came back as %#v", got.Headers["nan"])
	}
}

// roundTrip is m written to the properties column and read back.
func roundTrip(t *testing.T, m mq.Message) mq.Message {
	t.Helper()
	b, err := encodeProps(&m)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeProps(b)
	if err != nil {
		t.Fatalf("%v\njson %s", err, b)
	}
	return got
}

func TestPropsRefusesUnknownType(t *testing.T) {
	m := mq.Message{Headers: amqp.Table{"ch": make(chan int)}}
	if _, err := encodeProps(&m); !errors.Is(err, ErrHeader) {
		t.Fatalf("err = %v, want ErrHeader", err)
	}
}

func TestSchemaNames(t *testing.T) {
	q, err := Schema{}.SQL()
	if err != nil || !strings.Contains(q, "CREATE TABLE IF NOT EXISTS acemq_outbox (") || !strings.Contains(q, "ON acemq_inbox (received_at)") {
		t.Fatalf("default schema: %v\n%s", err, q)
	}
	q, err = Schema{Outbox: "app.out", Inbox: "app.inb"}.SQL()
	if err != nil || !strings.Contains(q, "INDEX IF NOT EXISTS out_pending ON app.out") {
		t.Fatalf("qualified schema: %v\n%s", err, q)
	}
	for _, bad := range []string{"Outbox", "a;drop table x", "a.b.c", `"x"`, "1x"} {
		if _, err := (Schema{Outbox: bad}).SQL(); !errors.Is(err, ErrSchema) {
			t.Errorf("%q: err = %v, want ErrSchema", bad, err)
		}
	}
}

func TestRetryWait(t *testing.T) {
	want := map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 5: 16 * time.Second, 10: 512 * time.Second, 11: 10 * time.Minute, 60: 10 * time.Minute}
	for n, w := range want {
		if got := retryWait(n); got != w {
			t.Errorf("retryWait(%d) = %v, want %v", n, got, w)
		}
	}
}

// Publish refuses what the wire could never carry before it touches the
// transaction.
func TestPublishRefusesTheUncarriable(t *testing.T) {
	o := New()
	long := strings.Repeat("k", 256)
	for name, c := range map[string]struct {
		key string
		m   mq.Message
	}{
		"routing key": {key: long},
		"message id":  {key: "k", m: mq.Message{MessageId: long}},
		"header":      {key: "k", m: mq.Message{Headers: amqp.Table{"ch": make(chan int)}}},
		"uint64":      {key: "k", m: mq.Message{Headers: amqp.Table{"n": uint64(1)}}},
		// Checked as the publish the row becomes (mq.CheckPublish): the
		// caller's transaction learns it, not a row set aside later.
		"expiration": {key: "k", m: mq.Message{Expiration: "soon"}},
	} {
		if err := o.Publish(t.Context(), nil, "", c.key, c.m); !errors.Is(err, mq.ErrInvalid) {
			t.Errorf("%s: err = %v, want mq.ErrInvalid", name, err)
		}
	}
	if err := o.Publish(t.Context(), nil, "", "k", mq.Message{}); !errors.Is(err, ErrNoTx) {
		t.Errorf("a valid message without a transaction: err = %v, want ErrNoTx", err)
	}
}
