package outbox

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/mq"
)

// Property and header bytes that are not UTF-8, or are NUL (which jsonb
// refuses), come back from the properties column byte for byte, in keys
// and values, nested; the column holds no \u0000.
func TestPropsKeepEveryByte(t *testing.T) {
	m := mq.Message{
		MessageId:     string([]byte{0x8a, 0xff, 0x10, 0x42, 0xc3, 0x28, 0, 1, 0xfe, 0xfe, 0x7f, 0x80, 0x81, 0x9f, 0xa0, 0xff}),
		CorrelationId: "\x63\x2d\xc3\x28",
		ReplyTo:       "reply\x00to", ContentType: "a\xffb", ContentEncoding: "\x00", Expiration: "6\xff",
		Type: "t\xff", UserId: "\xfe", AppId: "app\x00",
		Headers: amqp.Table{
			"\x8a\xff-sig": "\x8a\xff-sig",
			"nul":          "a\x00b",
			"k\x00ey":      []byte{0, 0xff},
			"plain":        "text",
			"\x01esc":      "a key that starts like an escaped one",
			"\x01":         "\x01",
			"nested":       amqp.Table{"\xc3(": "\xfe\x00", "list": []any{"\xc3(", "ok", int32(3), amqp.Table{"\x00": "\x00"}}},
		},
	}
	b, err := encodeProps(&m)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(b, []byte(`\u0000`)) {
		t.Errorf("the column would hold a NUL (jsonb refuses it, SQLSTATE 22P05): %s", b)
	}
	if got := roundTrip(t, m); !reflect.DeepEqual(got, m) {
		t.Fatalf("round trip changed bytes:\n got %#v\nwant %#v\njson %s", got, m, b)
	}
}

// What the outbox's text columns cannot hold (an exchange name, routing
// key or ordering key that is not UTF-8 or holds a NUL) is refused at the
// call with mq.ErrInvalid saying why, before the transaction is touched.
func TestPublishRefusesUnstorableNames(t *testing.T) {
	for name, c := range map[string]struct {
		exchange, key string
		o             *Outbox
	}{
		"routing key not UTF-8":   {key: "orders.\xff", o: New()},
		"exchange with NUL":       {exchange: "ex\x00", key: "k", o: New()},
		"ordering key not UTF-8":  {key: "k", o: New(OrderBy(func(string, string, *mq.Message) string { return "\xc3(" }))},
		"ordering key with a NUL": {key: "k", o: New(OrderBy(func(string, string, *mq.Message) string { return "a\x00" }))},
	} {
		err := c.o.Publish(t.Context(), nil, c.exchange, c.key, mq.Message{})
		if !errors.Is(err, mq.ErrInvalid) || !strings.Contains(err.Error(), "UTF-8") {
			t.Errorf("%s: err = %v, want mq.ErrInvalid naming UTF-8", name, err)
		}
	}
}
