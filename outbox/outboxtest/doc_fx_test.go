//go:build integration

package outboxtest_test

// docs/outbox.md: an fx app's consumer with Inbox set, tested with
// fxmoduletest.ConsumerWithInbox and the test's inbox in the app's place.

import (
	"testing"

	"github.com/acemq/acemq-go/fxmodule/fxmoduletest"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/outbox/outboxtest"
)

func TestBillingConsumer(t *testing.T) {
	db := outboxtest.New(t, tables) // the app's table names, unqualified
	if _, err := db.Exec(`CREATE TABLE invoices (order_id text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	// The app's fxmodule.Consumer, with Inbox: true, run as the app runs it.
	c := fxmoduletest.ConsumerWithInbox(t, db.Inbox(), billingConsumer(), billingTopology())
	m := mq.Message{MessageId: "m-1", Body: []byte("o-1")}
	if r := c.Deliver(m); r.Outcome != mq.OutcomeAck || r.Attempts != 1 {
		t.Fatalf("first delivery: %v, want acknowledged after one call", r)
	}
	if r := c.Deliver(m); r.Outcome != mq.OutcomeAck || r.Attempts != 0 {
		t.Fatalf("redelivery: %v, want acknowledged without calling the handler", r)
	}
}
