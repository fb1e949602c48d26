package outbox_test

import (
	"context"
	"encoding/json"
	"log"
	"time"

	"github.com/acemq/acemq-go/middleware"
)

// docs/outbox.md: the imports of its snippets.
import (
	"database/sql"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" driver; without it sql.Open("pgx", …) fails: sql: unknown driver "pgx"
	"go.uber.org/fx"

	"github.com/acemq/acemq-go/fxmodule"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/outbox"
	"github.com/acemq/acemq-go/retry"
	"github.com/acemq/acemq-go/topology"
)

// docs/outbox.md: The outbox.

// placeOrder writes the order and its event in one transaction: both
// commit, or neither does.
func placeOrder(ctx context.Context, db *sql.DB, ob *outbox.Outbox, id string, total int) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() // a no-op once committed
	if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id, total) VALUES ($1, $2)`, id, total); err != nil {
		return err
	}
	body, _ := json.Marshal(map[string]any{"id": id, "total": total})
	err = ob.Publish(ctx, tx, "orders-events", "order.placed", mq.Message{
		MessageId: "order.placed:" + id, ContentType: "application/json", Body: body,
	})
	if err != nil {
		return err
	}
	return tx.Commit()
}

// A service without fx: create the tables, write through the outbox, run
// a relay (one per instance; they share the table).
func Example() {
	ctx := context.Background()
	db, err := sql.Open("pgx", "postgres://postgres@127.0.0.1:5432/test")
	if err != nil {
		log.Fatal(err)
	}
	if err := (outbox.Schema{}).Create(ctx, db); err != nil {
		log.Fatal(err)
	}
	b := mq.New(mq.Config{URLs: []string{"amqp://guest:guest@127.0.0.1:5672/"}})
	if err := b.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer b.Close(ctx)

	relay := outbox.NewRelay(db, b)
	go relay.Run(ctx) // until ctx ends; give it a context you cancel at stop

	ob := outbox.New()
	if err := placeOrder(ctx, db, ob, "o-42", 1999); err != nil {
		log.Fatal(err)
	}
}

// docs/outbox.md: The inbox.

// bookCarrier books once per order: the booking row commits with the
// inbox's record of the message, so a redelivery finds the record and is
// acknowledged without calling it.
func bookCarrier(ctx context.Context, d *mq.Delivery) error {
	var order struct{ ID string }
	if err := json.Unmarshal(d.Body, &order); err != nil {
		return middleware.Reject(err)
	}
	tx := outbox.Tx(ctx) // the inbox's transaction
	_, err := tx.ExecContext(ctx, `INSERT INTO bookings (order_id) VALUES ($1)`, order.ID)
	return err
}

// The inbox goes inside the retry ladder, next to the handler: each
// attempt is a transaction of its own.
func ExampleInbox() {
	ctx := context.Background()
	db, _ := sql.Open("pgx", "postgres://postgres@127.0.0.1:5432/test")
	b := mq.New(mq.Config{URLs: []string{"amqp://guest:guest@127.0.0.1:5672/"}})
	_ = b.Start(ctx)
	c, err := b.Consume(ctx, "shipping.orders", mq.HandlerFunc(bookCarrier),
		middleware.Standard(retry.Exponential(6, time.Second)),
		mq.WithMiddleware(outbox.Inbox(db)))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Stop(ctx)
}

// docs/outbox.md: With fx.

// OrderEvents is the service's publisher of order events; through
// outbox.AsSender it writes to the outbox.
type OrderEvents interface{ mq.Sender }

// tables names the service's outbox and inbox tables, once.
var tables = outbox.Schema{Outbox: "shipping_outbox", Inbox: "shipping_inbox"}

// openDB opens the database and creates the tables at start. outbox.Module
// asks for the *sql.DB, so this hook runs before the module checks them.
func openDB(lc fx.Lifecycle) (*sql.DB, error) {
	db, err := sql.Open("pgx", "postgres://postgres@127.0.0.1:5432/test")
	if err != nil {
		return nil, err
	}
	lc.Append(fx.Hook{
		OnStart: func(ctx context.Context) error { return tables.Create(ctx, db) },
		OnStop:  func(context.Context) error { return db.Close() },
	})
	return db, nil
}

// With fx: outbox.Module after fxmodule.Module runs the relay with the
// app's lifecycle, provides the inbox a consumer runs in with Inbox: true
// (the schema given once, to the module), and checks the tables at start;
// AsSender gives handlers an outbox-backed OrderEvents (its exchange
// checked at start). Inside the inbox,
// OrderEvents.Publish writes within the inbox's transaction, so the
// effect, the record and the follow-up event commit together.
func ExampleModule() {
	fx.New(
		fx.Supply(mq.Config{URLs: []string{"amqp://guest:guest@127.0.0.1:5672/"}}),
		fx.Provide(openDB),
		fxmodule.Module,
		// orders-events is a topic exchange: what OrderEvents publishes is an
		// event, dropped when no queue is bound for it (as AsPublisher's).
		fxmodule.AsTopology(topology.New().Exchange("orders-events", topology.Topic).
			Queue("shipping.orders", topology.Retry(retry.Exponential(6, time.Second)))),
		outbox.Module(outbox.WithSchema(tables)),
		outbox.AsSender[OrderEvents]("orders-events"),
		fxmodule.AsConsumer(func() fxmodule.Consumer {
			return fxmodule.Consumer{Queue: "shipping.orders", Handler: mq.HandlerFunc(bookCarrier), Standard: true, Inbox: true}
		}),
	).Run()
}

// A service without fx checks the tables at start-up: Schema.Check fails,
// naming the table and its schema, when one is missing or of another
// shape (and creates nothing).
func ExampleSchema_Check() {
	ctx := context.Background()
	db, err := sql.Open("pgx", "postgres://postgres@127.0.0.1:5432/test")
	if err != nil {
		log.Fatal(err)
	}
	if err := tables.Check(ctx, db); err != nil {
		log.Fatal(err) // outbox: bad schema: the inbox table public.shipping_inbox does not exist (…)
	}
}
