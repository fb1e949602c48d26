//go:build integration

package outboxtest_test

import (
	"context"
	"fmt"

	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/outbox"
	"github.com/acemq/acemq-go/outbox/outboxtest"
)

// A handler that writes through the inbox's transaction, tested with no
// broker and no nil guard: the same message twice, its effect once.
func Example() {
	db := outboxtest.New(nil) // in a test: outboxtest.New(t), dropped when it ends
	defer db.Close()
	if _, err := db.Exec(`CREATE TABLE invoices (order_id text NOT NULL)`); err != nil {
		panic(err)
	}
	bill := mq.HandlerFunc(func(ctx context.Context, d *mq.Delivery) error {
		_, err := outbox.Tx(ctx).ExecContext(ctx, `INSERT INTO invoices (order_id) VALUES ($1)`, string(d.Body))
		return err
	})
	c := db.Consumer(nil, "billing.orders", bill)
	m := mq.Message{MessageId: "m-1", Body: []byte("o-1")}
	first, again := c.Deliver(m), c.Deliver(m)
	var n int
	_ = db.QueryRow(`SELECT count(*) FROM invoices`).Scan(&n)
	fmt.Println(first)
	fmt.Println(again)
	fmt.Println("invoices:", n)
	// Output:
	// ack after 1 attempt(s)
	// ack after 0 attempt(s)
	// invoices: 1
}
