//go:build integration

package outboxtest_test

// docs/outbox.md: Testing a handler that uses the inbox's transaction.

import (
	"testing"

	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/outbox/outboxtest"
)

func TestBill(t *testing.T) {
	db := outboxtest.New(t) // PG_URL, default the local test database

	// The handler's table, in the test's schema.
	if _, err := db.Exec(`CREATE TABLE invoices (order_id text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	c := db.Consumer(t, "billing.orders", mq.HandlerFunc(bill)) // mqtest's consumer, the inbox innermost
	m := mq.Message{MessageId: "m-1", Body: []byte("o-1")}
	c.Deliver(m) // bill runs in the inbox's transaction, as in production
	if r := c.Deliver(m); r.Outcome != mq.OutcomeAck || r.Attempts != 0 {
		t.Fatalf("redelivery: %v, want acknowledged without calling bill", r)
	}
}
