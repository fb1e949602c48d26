package main

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the pgx driver for database/sql

	"go.uber.org/fx"

	"github.com/acemq/acemq-go/outbox"
	"github.com/acemq/acemq-go/typed"
)

// The service's own tables, beside the outbox's and the inbox's: orders
// (written with their order.placed event in one transaction) and shipments
// (one per order, written in the inbox's transaction). SERVICE_TABLES puts
// a prefix on each (the test that runs the service uses goit_*).
var (
	tablePrefix    = os.Getenv("SERVICE_TABLES")
	OrdersTable    = tablePrefix + "orders"
	ShipmentsTable = tablePrefix + "shipments"
	Tables         = outbox.Schema{Outbox: tablePrefix + "outbox", Inbox: tablePrefix + "inbox"}
)

// database opens PG_URL (default the local PostgreSQL's database test)
// with the pgx driver and creates the service's tables when they are
// missing; it is closed at stop, after everything that uses it.
func database(lc fx.Lifecycle) (*sql.DB, error) {
	url := os.Getenv("PG_URL")
	if url == "" {
		url = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	}
	db, err := sql.Open("pgx", url)
	if err != nil {
		return nil, err
	}
	lc.Append(fx.Hook{
		OnStart: func(ctx context.Context) error { return createTables(ctx, db) },
		OnStop:  func(context.Context) error { return db.Close() },
	})
	return db, nil
}

// createTables creates the outbox's, the inbox's and the service's tables
// when they are missing.
func createTables(ctx context.Context, db *sql.DB) error {
	if err := Tables.Create(ctx, db); err != nil {
		return err
	}
	_, err := db.ExecContext(ctx, fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (id text PRIMARY KEY, address text NOT NULL, items int NOT NULL, placed_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE IF NOT EXISTS %s (order_id text PRIMARY KEY, tracking text NOT NULL, booked_at timestamptz NOT NULL DEFAULT now())`, OrdersTable, ShipmentsTable))
	return err
}

// placeOrder writes the order and its order.placed event in one
// transaction: the event goes out if and only if the order is stored. An
// order placed before (a client's retry) is not placed again: placed is
// false, and no second event is written.
func placeOrder(ctx context.Context, db *sql.DB, events OrderEvents, o Order) (placed bool, err error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return false, err
	}
	defer tx.Rollback() //nolint:errcheck // a no-op once committed
	res, err := tx.ExecContext(ctx, "INSERT INTO "+OrdersTable+" (id, address, items) VALUES ($1, $2, $3) ON CONFLICT (id) DO NOTHING", o.ID, o.Address, o.Items)
	if err != nil {
		return false, err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return false, nil
	}
	m, err := typed.Encode(o)
	if err != nil {
		return false, err
	}
	m.MessageId = "order.placed:" + o.ID // the inbox's key: one per order
	if err := events.Publish(outbox.WithTx(ctx, tx), "order.placed", m); err != nil {
		return false, err
	}
	return true, tx.Commit()
}

// recordShipment stores the order's shipment in the inbox's transaction,
// so it commits with the inbox's record of the order.placed message. The
// consumer always runs in the inbox (Inbox: true), in its tests too
// (fxmoduletest.ConsumerWithInbox), so the transaction is always there.
func recordShipment(ctx context.Context, orderID, tracking string) error {
	_, err := outbox.Tx(ctx).ExecContext(ctx, "INSERT INTO "+ShipmentsTable+" (order_id, tracking) VALUES ($1, $2)", orderID, tracking)
	return err
}

// relayOptions are outbox.Module's: the tables (for the relay, the outbox
// and the inbox at once). order.shipped may have no audience yet; it goes
// to a topic exchange of the app's topology, so the relay publishes it as
// an event, as fxmodule.AsPublisher would: one nobody takes is dropped.
func relayOptions() []outbox.Option {
	return []outbox.Option{outbox.WithSchema(Tables), outbox.PollInterval(time.Second)}
}
