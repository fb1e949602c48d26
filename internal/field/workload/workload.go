package workload

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the pgx driver for database/sql

	"github.com/acemq/acemq-go/internal/field/history"
	"github.com/acemq/acemq-go/middleware"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/outbox"
	"github.com/acemq/acemq-go/retry"
	"github.com/acemq/acemq-go/topology"
)

// Names is the field's names: every queue and exchange starts with
// Prefix, every table with Tables. ClassicRungs keeps the scripted queue's
// broker waits in classic rungs (FIELD_RUNGS=classic, for comparison);
// by default they go through durable rungs.
type Names struct {
	Prefix       string
	Tables       string
	ClassicRungs bool
}

// Orders is the topic exchange the relays publish committed orders to.
func (n Names) Orders() string { return n.Prefix + "orders" }

// InboxQueue is the quorum queue the inbox consumer takes orders from.
func (n Names) InboxQueue() string { return n.Prefix + "inbox" }

// WorkQueue is the quorum queue of plain publishes, consumed through
// middleware.Standard by the scripted handler.
func (n Names) WorkQueue() string { return n.Prefix + "work" }

// Schema is the outbox's and the inbox's tables.
func (n Names) Schema() outbox.Schema {
	return outbox.Schema{Outbox: n.Tables + "outbox", Inbox: n.Tables + "inbox"}
}

// OrdersTable holds committed orders (written with their outbox row in
// one transaction); EffectsTable the inbox handler's effects, one row per
// run of the handler whose transaction committed (no unique key on
// purpose: a second row is a duplicate effect the checker counts).
func (n Names) OrdersTable() string  { return n.Tables + "orders" }
func (n Names) EffectsTable() string { return n.Tables + "effects" }

// WorkAttempts is how many attempts the scripted queue's policy gives a
// message.
const WorkAttempts = 3

// WorkPolicy is the scripted queue's policy: WorkAttempts attempts, waits
// 1.5 s (in the consumer's process) and 3 s (above the 2 s in-process
// limit, so through a broker rung): the durable rung
// <work>.retry.3s.quorum (retry.DurableRungs), or the classic rung
// <work>.retry.3s when n.ClassicRungs.
func (n Names) WorkPolicy() retry.Policy {
	opts := []retry.Option{retry.InProcessLimit(2 * time.Second)}
	if !n.ClassicRungs {
		opts = append(opts, retry.DurableRungs())
	}
	return retry.Exponential(WorkAttempts, 1500*time.Millisecond, opts...)
}

// RungMode is the mode of the scripted queue's broker waits, as the
// FIELD line and FIELD_RUNGS name it: "durable" or "classic".
func (n Names) RungMode() string {
	if n.ClassicRungs {
		return "classic"
	}
	return "durable"
}

// InboxPolicy is the inbox consumer's: every wait in-process, so the
// queue's order holds through retries (mq.InOrder).
func InboxPolicy() retry.Policy { return retry.Fixed(30, time.Second) }

// Keys is how many ordering keys the writer spreads orders over.
const Keys = 8

// InboxArgs are the inbox queue's arguments. Without them RabbitMQ 4.3
// keeps what the consumer had not settled when its node died checked out
// to the dead consumer (up to two minutes measured) while it sends what is
// behind it to the consumer resubscribed on another node: the inbox's
// order breaks. With them it sent nothing until it gave that back (58-60 s
// measured), and the order held (TestInOrderAcrossNodeKill;
// docs/reliability.md, InOrder).
func InboxArgs() map[string]any { return map[string]any{"x-consumer-disconnected-timeout": 0} }

// Topology is the field's topology.
func (n Names) Topology() *topology.Topology {
	return topology.New().
		Exchange(n.Orders(), topology.Topic).
		Queue(n.InboxQueue(), topology.DeadLetter(), topology.Retry(InboxPolicy()), topology.Args(InboxArgs())).
		Binding(n.InboxQueue(), n.Orders(), "order.*").
		Queue(n.WorkQueue(), topology.DeadLetter(), topology.Retry(n.WorkPolicy()))
}

// Queues is every queue a message can wait in, the ends included.
func (n Names) Queues() []string {
	q := []string{n.WorkQueue(), n.InboxQueue(), topology.DeadLetterQueue(n.WorkQueue()), topology.ParkedQueue(n.WorkQueue()),
		topology.DeadLetterQueue(n.InboxQueue()), topology.ParkedQueue(n.InboxQueue())}
	for _, d := range n.WorkPolicy().BrokerRungs() {
		q = append(q, topology.Rung(n.WorkQueue(), n.WorkPolicy(), d).Name)
	}
	return q
}

// Rungs is each broker rung of the scripted queue (durable or classic,
// as n says) and its TTL (the rung's wait).
func (n Names) Rungs() map[string]time.Duration {
	m := map[string]time.Duration{}
	for _, d := range n.WorkPolicy().BrokerRungs() {
		m[topology.Rung(n.WorkQueue(), n.WorkPolicy(), d).Name] = d
	}
	return m
}

// RungHook is an mq.PublishHook that calls hop with the message id and
// the rung of every hop to one of n's rungs the broker confirmed.
func (n Names) RungHook(hop func(id, rung string)) mq.PublishHook {
	return rungHook{rungs: n.Rungs(), hop: hop}
}

type rungHook struct {
	rungs map[string]time.Duration
	hop   func(id, rung string)
}

func (h rungHook) OnPublish(ctx context.Context, _ *mq.PublishInfo) context.Context { return ctx }

func (h rungHook) OnPublishDone(_ context.Context, p *mq.PublishInfo, err error) {
	if err != nil || p.Hop != mq.OutcomeRetry || p.Exchange != "" {
		return
	}
	if _, ok := h.rungs[p.RoutingKey]; ok {
		h.hop(p.Message.MessageId, p.RoutingKey)
	}
}

// CreateTables drops the field's tables and creates them empty.
func (n Names) CreateTables(ctx context.Context, db *sql.DB) error {
	s := n.Schema()
	if _, err := db.ExecContext(ctx, fmt.Sprintf("DROP TABLE IF EXISTS %s, %s, %s, %s", s.Outbox, s.Inbox, n.OrdersTable(), n.EffectsTable())); err != nil {
		return err
	}
	if err := s.Create(ctx, db); err != nil {
		return err
	}
	_, err := db.ExecContext(ctx, fmt.Sprintf(`CREATE TABLE %s (id text PRIMARY KEY, key text NOT NULL, seq int NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp());
CREATE TABLE %s (n bigserial PRIMARY KEY, order_id text NOT NULL, key text NOT NULL, seq int NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())`, n.OrdersTable(), n.EffectsTable()))
	return err
}

// Script is what a plain message carries: fail its first Fail attempts,
// or park it.
type Script struct {
	ID   string `json:"id"`
	Fail int    `json:"fail"`
	Park bool   `json:"park,omitempty"`
}

// End is where the script says the message ends.
func (s Script) End() string {
	switch {
	case s.Park:
		return history.EndParked
	case s.Fail >= WorkAttempts:
		return history.EndDLQ
	default:
		return history.EndHandled
	}
}

// OrderEvent is what an order's outbox row carries.
type OrderEvent struct {
	ID  string `json:"id"`
	Key string `json:"key"`
	Seq int    `json:"seq"`
}

// keyHeader carries an order's ordering key to the outbox's OrderBy.
const keyHeader = "x-field-key"

// NewBroker is a broker on urls, named proc, with hooks (mq.Config.Hooks),
// started (retrying until ctx ends).
func NewBroker(ctx context.Context, urls []string, proc string, log *slog.Logger, hooks ...any) (*mq.Broker, error) {
	b := mq.New(mq.Config{URLs: urls, ConnectionName: proc, Logger: log, Hooks: hooks})
	if err := b.Start(ctx); err != nil {
		return nil, err
	}
	return b, nil
}

// OrderWriter writes orders with their outbox rows.
type OrderWriter struct {
	n  Names
	ob *outbox.Outbox
}

// OrderWriter is the writer's outbox: one ordering key per order key.
func (n Names) OrderWriter() OrderWriter {
	return OrderWriter{n: n, ob: outbox.New(outbox.WithSchema(n.Schema()), outbox.OrderBy(func(_, _ string, m *mq.Message) string {
		k, _ := m.Headers[keyHeader].(string)
		return k
	}))}
}

// Write writes o and its outbox row in tx.
func (w OrderWriter) Write(ctx context.Context, tx *sql.Tx, o OrderEvent) error {
	if _, err := tx.ExecContext(ctx, "INSERT INTO "+w.n.OrdersTable()+" (id, key, seq) VALUES ($1, $2, $3)", o.ID, o.Key, o.Seq); err != nil {
		return err
	}
	body, _ := json.Marshal(o)
	return w.ob.Publish(ctx, tx, w.n.Orders(), "order.placed", mq.Message{Body: body, ContentType: "application/json", MessageId: o.ID, Headers: map[string]any{keyHeader: o.Key}})
}

// RunRelay runs one relay on the outbox table until ctx ends.
func (n Names) RunRelay(ctx context.Context, db *sql.DB, b *mq.Broker) error {
	return outbox.NewRelay(db, b, outbox.WithSchema(n.Schema()), outbox.PollInterval(500*time.Millisecond)).Run(ctx)
}

// ScriptPublisher is the plain publisher to the scripted queue (the
// default exchange, the queue's name as routing key, mandatory).
type ScriptPublisher struct {
	n Names
	p *mq.Publisher
}

// ScriptPublisher opens the plain publisher on b.
func (n Names) ScriptPublisher(b *mq.Broker) ScriptPublisher {
	return ScriptPublisher{n: n, p: b.Publisher("")}
}

// Publish publishes s; nil once confirmed and routed.
func (p ScriptPublisher) Publish(ctx context.Context, s Script) error {
	body, _ := json.Marshal(s)
	return p.p.Publish(ctx, p.n.WorkQueue(), mq.Message{Body: body, ContentType: "application/json", MessageId: s.ID})
}

// ParkError is what the scripted handler returns to park a message.
func ParkError(id string) error { return middleware.Park(fmt.Errorf("field: script parks %s", id)) }

// Delivery is what a field handler sees of a delivery.
type Delivery struct {
	ID        string
	Body      []byte
	Attempt   int
	Timestamp time.Time
	// Redelivered: the broker had sent it before.
	Redelivered bool
}

// ConsumeWork consumes the scripted queue through middleware.Standard
// with n.WorkPolicy, four at a time.
func (n Names) ConsumeWork(ctx context.Context, b *mq.Broker, h func(ctx context.Context, d Delivery) error) (*mq.Consumer, error) {
	return b.Consume(ctx, n.WorkQueue(), mq.HandlerFunc(func(ctx context.Context, d *mq.Delivery) error {
		return h(ctx, Delivery{ID: d.MessageId, Body: d.Body, Attempt: d.Attempt(), Timestamp: d.Timestamp})
	}), middleware.Standard(n.WorkPolicy()), mq.WithConcurrency(4))
}

// ConsumeInbox consumes the orders through middleware.Standard with
// InboxPolicy and the inbox inside it, in order, one at a time; h writes
// its effect with the transaction it is given.
func (n Names) ConsumeInbox(ctx context.Context, b *mq.Broker, db *sql.DB, h func(ctx context.Context, tx *sql.Tx, d Delivery) error) (*mq.Consumer, error) {
	return b.Consume(ctx, n.InboxQueue(), mq.HandlerFunc(func(ctx context.Context, d *mq.Delivery) error {
		tx := outbox.Tx(ctx)
		if tx == nil {
			return fmt.Errorf("field: no inbox transaction for %s", d.MessageId)
		}
		return h(ctx, tx, Delivery{ID: d.MessageId, Body: d.Body, Attempt: d.Attempt(), Timestamp: d.Timestamp, Redelivered: d.Redelivered})
	}), middleware.Standard(InboxPolicy()),
		mq.WithMiddleware(outbox.Inbox(db, outbox.WithSchema(n.Schema()))),
		mq.InOrder())
}

// Effect writes an order's effect in the inbox's transaction.
func (n Names) Effect(ctx context.Context, tx *sql.Tx, o OrderEvent) error {
	_, err := tx.ExecContext(ctx, "INSERT INTO "+n.EffectsTable()+" (order_id, key, seq) VALUES ($1, $2, $3)", o.ID, o.Key, o.Seq)
	return err
}
