package outbox

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/propagation"

	"github.com/acemq/acemq-go/mq"
)

// Outbox writes messages into the outbox table inside the caller's
// transaction. It holds no connection and is safe for concurrent use.
type Outbox struct {
	schema  Schema
	err     error
	prop    propagation.TextMapPropagator
	orderBy func(exchange, routingKey string, m *mq.Message) string
	insert  string
	notify  bool
}

// New returns an Outbox. Options: WithSchema, WithPropagators, OrderBy,
// WithNotify (WithoutNotify is the default). A bad table name makes every
// Publish fail with ErrSchema.
func New(opts ...OutboxOption) *Outbox {
	c := newConfig(opts, OutboxOption.applyOutbox)
	s, err := c.schema.resolved()
	o := &Outbox{schema: s, err: err, prop: c.prop, orderBy: c.orderBy, notify: !c.noNotify}
	insert := fmt.Sprintf(`INSERT INTO %s (exchange, routing_key, ordering_key, message_id, body, properties, trace)
VALUES ($1, $2, $3, $4, $5, $6::text::jsonb, $7::text::jsonb)`, s.Outbox)
	if o.notify {
		// One round trip: the row, and the notification PostgreSQL
		// delivers when (and only if) the transaction commits.
		insert = "WITH r AS (" + insert + " RETURNING 1) SELECT pg_notify($8, '') FROM r"
	}
	o.insert = insert
	return o
}

// Publish writes m, to be published to exchange with routingKey, into the
// outbox table within tx (with WithNotify, PostgreSQL also notifies the
// relays when tx commits; without, they find the row within milliseconds). It neither commits nor rolls back tx:
// the message is published if and only if tx commits.
//
// Everything is kept: the body, every property and header (each header
// value with its type), and the trace context of ctx's span, which the
// relay's publish continues. A new message's defaults are applied here, as
// Publisher.Publish would apply them (persistent; a MessageId and a
// Timestamp when empty), so the id is known at once and the same on every
// resend. Bytes that are not UTF-8 text (a raw id, a signature header, a
// NUL) are kept exactly (see docs/outbox.md for how they are stored). What
// the wire could never carry (a name or property over 255 bytes, a header
// value AMQP cannot hold), and an exchange name or routing key the
// table's text columns cannot hold (not UTF-8, or with a NUL byte), is
// refused here, before anything is written, with an error matching
// mq.ErrInvalid. An ordering key (OrderBy) may be any string: one its
// index cannot hold (over 2048 bytes, or not UTF-8 text) is stored by its
// SHA-256, as the inbox stores such keys, and orders as the key would.
func (o *Outbox) Publish(ctx context.Context, tx *sql.Tx, exchange, routingKey string, m mq.Message) error {
	if o.err != nil {
		return o.err
	}
	// Refuse, before anything is written, what the broker's wire could
	// never carry: the row is checked as the publish it will become
	// (names and short strings too long, header values AMQP cannot hold, a
	// malformed expiration, a header frame too big), so the caller's
	// transaction learns it, not a set-aside row.
	if err := mq.CheckPublish(exchange, routingKey, m); err != nil {
		return fmt.Errorf("outbox: %w", err)
	}
	if m.DeliveryMode == 0 {
		m.DeliveryMode = amqp.Persistent
	}
	if m.MessageId == "" {
		m.MessageId = mq.NewMessageID()
	}
	if m.Timestamp.IsZero() {
		m.Timestamp = time.Now()
	}
	p, err := encodeProps(&m)
	if err != nil {
		return err
	}
	// The JSON columns are sent as text, which every database/sql driver
	// passes as it is (lib/pq sends a []byte as bytea, which jsonb refuses).
	var trace *string
	carrier := propagation.MapCarrier{}
	o.prop.Inject(ctx, carrier)
	if len(carrier) > 0 {
		b, _ := json.Marshal(map[string]string(carrier)) // a map of strings: cannot fail
		t := string(b)
		trace = &t
	}
	var key string
	if o.orderBy != nil {
		// Only equal keys matter to the order, so a key the ordering
		// index cannot hold (over 2048 bytes: its btree takes about 2.7 KB
		// a row; not UTF-8 text) is stored by its hash, as the inbox
		// stores its keys: one key, one stored key.
		key = storedKey(o.orderBy(exchange, routingKey, &m))
	}
	if err := checkText(exchange, routingKey); err != nil {
		return fmt.Errorf("outbox: publish to exchange %q with key %q: %w", exchange, routingKey, err)
	}
	if tx == nil {
		return ErrNoTx
	}
	body := m.Body
	if body == nil {
		body = []byte{}
	}
	// The message_id column is for people reading the table; the id itself,
	// every byte of it, is in properties.
	args := []any{exchange, routingKey, key, textOf(m.MessageId), body, string(p), trace}
	if o.notify {
		args = append(args, o.schema.channel())
	}
	if _, err := tx.ExecContext(ctx, o.insert, args...); err != nil {
		return fmt.Errorf("outbox: write to %s: %w", o.schema.Outbox, err)
	}
	return nil
}

// checkText refuses names the outbox's text columns cannot hold: an
// exchange or routing key that is not valid UTF-8 or holds a NUL byte
// (PostgreSQL's text refuses both), with mq.ErrInvalid.
func checkText(exchange, routingKey string) error {
	for _, f := range [...]struct{ name, v string }{
		{"exchange name", exchange}, {"routing key", routingKey},
	} {
		if !isText(f.v) {
			return fmt.Errorf("%w: %s %q is not UTF-8 text without NUL bytes, which the outbox table's text column cannot hold",
				mq.ErrInvalid, f.name, f.v)
		}
	}
	return nil
}

// textOf is s as PostgreSQL's text can hold it: invalid UTF-8 and NUL
// bytes replaced by U+FFFD.
func textOf(s string) string {
	if isText(s) {
		return s
	}
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}

// Sender returns an mq.Sender to exchange whose Publish writes to the
// outbox within the transaction in its context (WithTx, or the inbox's):
// code written against mq.Sender publishes through the outbox unchanged.
// Without a transaction in the context, Publish fails with ErrNoTx.
func (o *Outbox) Sender(exchange string) mq.Sender { return sender{o: o, exchange: exchange} }

type sender struct {
	o        *Outbox
	exchange string
}

func (s sender) Publish(ctx context.Context, routingKey string, m mq.Message) error {
	return s.o.Publish(ctx, Tx(ctx), s.exchange, routingKey, m)
}

type txKey struct{}

// WithTx returns ctx carrying tx, for Tx and for Sender's publishes.
func WithTx(ctx context.Context, tx *sql.Tx) context.Context {
	return context.WithValue(ctx, txKey{}, tx)
}

// Tx is the transaction ctx carries: inside an Inbox handler, the one that
// records the delivery (the handler's writes made with it commit with the
// record), or one given to WithTx. Nil when there is none.
func Tx(ctx context.Context) *sql.Tx {
	tx, _ := ctx.Value(txKey{}).(*sql.Tx)
	return tx
}
