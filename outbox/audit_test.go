package outbox

import (
	"bytes"
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"net"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/middleware"
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

// What the outbox's text columns cannot hold (an exchange name or routing
// key that is not UTF-8 or holds a NUL) is refused at the call with
// mq.ErrInvalid saying why, before the transaction is touched. An ordering
// key is stored as the inbox stores keys (storedKey), so any key passes
// these checks (and fails only for want of a transaction here).
func TestPublishRefusesUnstorableNames(t *testing.T) {
	for name, c := range map[string]struct {
		exchange, key string
		o             *Outbox
	}{
		"routing key not UTF-8": {key: "orders.\xff", o: New()},
		"exchange with NUL":     {exchange: "ex\x00", key: "k", o: New()},
	} {
		err := c.o.Publish(t.Context(), nil, c.exchange, c.key, mq.Message{})
		if !errors.Is(err, mq.ErrInvalid) || !strings.Contains(err.Error(), "UTF-8") {
			t.Errorf("%s: err = %v, want mq.ErrInvalid naming UTF-8", name, err)
		}
	}
	for _, key := range []string{"\xc3(", "a\x00", strings.Repeat("k", 3000)} {
		o := New(OrderBy(func(string, string, *mq.Message) string { return key }))
		if err := o.Publish(t.Context(), nil, "", "k", mq.Message{}); !errors.Is(err, ErrNoTx) {
			t.Errorf("ordering key %.20q: err = %v, want only ErrNoTx (the key is stored by its hash)", key, err)
		}
	}
}

// storedKey keeps a key PostgreSQL's text can hold as it is (so records
// written before it keep their meaning), and records any other by its
// hash: never more than maxKeyText+ bytes, always text, one stored key per
// key.
func TestStoredKey(t *testing.T) {
	for _, k := range []string{"order-42", "ünïcödé", strings.Repeat("k", maxKeyText)} {
		if got := storedKey(k); got != k {
			t.Errorf("storedKey(%q) = %q, want it as it is", k, got)
		}
	}
	hashed := []string{
		"\x8a\xff\x10\x42", "a\x00b", strings.Repeat("k", maxKeyText+1), strings.Repeat("é", 2000),
		hashedKey + "0000", // looks like a hashed key: hashed too, so the two never meet
	}
	seen := map[string]string{}
	for _, k := range hashed {
		got := storedKey(k)
		if !strings.HasPrefix(got, hashedKey) || len(got) != len(hashedKey)+64 || !isText(got) {
			t.Errorf("storedKey(%q) = %q, want %s and 64 hex digits", k, got, hashedKey)
		}
		if other, ok := seen[got]; ok {
			t.Errorf("%q and %q are stored as one key", k, other)
		}
		seen[got] = k
		if storedKey(k) != got {
			t.Errorf("storedKey(%q) is not stable", k)
		}
	}
}

// failed tells the database's failures (waited out) from the message's
// (returned for the ladder).
func TestInboxFailedClassifies(t *testing.T) {
	in := &inbox{}
	live := t.Context()
	dead, cancel := context.WithDeadline(live, time.Now().Add(-time.Second))
	defer cancel()
	stopped, stop := context.WithCancel(live)
	stop()
	pg := func(code string) error { return &pgconn.PgError{Code: code, Message: "x"} }
	for name, c := range map[string]struct {
		ctx     context.Context
		err     error
		outage  bool
		is      []error
		reject  bool
		requeue bool
	}{
		"connection refused":     {ctx: live, err: &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, outage: true},
		"connection reset":       {ctx: live, err: syscall.ECONNRESET, outage: true},
		"bad connection":         {ctx: live, err: driver.ErrBadConn, outage: true},
		"admin shutdown 57P01":   {ctx: live, err: pg("57P01"), outage: true},
		"crash shutdown 57P02":   {ctx: live, err: pg("57P02"), outage: true},
		"cannot connect 57P03":   {ctx: live, err: pg("57P03"), outage: true},
		"connection 08006":       {ctx: live, err: pg("08006"), outage: true},
		"too many clients 53300": {ctx: live, err: pg("53300"), outage: true},
		"missing table 42P01":    {ctx: live, err: pg("42P01"), outage: true},
		"bad byte 22021":         {ctx: live, err: pg("22021"), reject: true},
		"index row size 54000":   {ctx: live, err: pg("54000"), reject: true},
		"deferred unique 23505":  {ctx: live, err: pg("23505"), reject: true},
		"aborted 25P02":          {ctx: live, err: pg("25P02"), is: []error{ErrTxAborted}},
		"commit rolled back":     {ctx: live, err: pgx.ErrTxCommitRollback, is: []error{ErrTxAborted}},
		"deadline":               {ctx: dead, err: sql.ErrTxDone, is: []error{context.DeadlineExceeded}},
		"stopped":                {ctx: stopped, err: context.Canceled, requeue: true},
		"serialization 40001":    {ctx: live, err: pg("40001")},
		"deadlock 40P01":         {ctx: live, err: pg("40P01")},
	} {
		err := in.failed(c.ctx, "commit", "k", c.err)
		var out *outage
		if got := errors.As(err, &out); got != c.outage {
			t.Errorf("%s: outage = %v, want %v (%v)", name, got, c.outage, err)
		}
		for _, target := range c.is {
			if !errors.Is(err, target) {
				t.Errorf("%s: %v is not %v", name, err, target)
			}
		}
		if got := middleware.IsReject(err); got != c.reject {
			t.Errorf("%s: rejected = %v, want %v (%v)", name, got, c.reject, err)
		}
		if got := errors.Is(err, mq.ErrRequeue); got != c.requeue {
			t.Errorf("%s: requeue = %v, want %v (%v)", name, got, c.requeue, err)
		}
	}
}
