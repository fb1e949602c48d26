package outbox_test

import (
	"context"
	"encoding/json"
	"log"
	"time"

	"github.com/acemq/acemq-go/middleware"
	"github.com/acemq/acemq-go/retry"
)

// docs/outbox.md: the imports of its snippets.
import (
	"database/sql"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" driver; without it sql.Open("pgx", …) fails: sql: unknown driver "pgx"
	"go.uber.org/fx"

	"github.com/acemq/acemq-go/fxmodule"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/outbox"
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

// With fx: outbox.Module after fxmodule.Module runs the relay with the
// app's lifecycle; AsSender gives handlers an outbox-backed OrderEvents.
// Inside an Inbox handler, OrderEvents.Publish writes within the inbox's
// transaction, so the effect, the record and the follow-up event commit
// together.
func ExampleModule() {
	fx.New(
		fx.Supply(mq.Config{URLs: []string{"amqp://guest:guest@127.0.0.1:5672/"}}),
		fx.Provide(func() (*sql.DB, error) { return sql.Open("pgx", "postgres://postgres@127.0.0.1:5432/test") }),
		fxmodule.Module,
		outbox.Module(),
		outbox.AsSender[OrderEvents]("orders-events"),
	).Run()
}
