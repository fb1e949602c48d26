package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"testing"
	"time"

	"go.uber.org/fx"

	"github.com/acemq/acemq-go/fxmodule/fxmoduletest"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/mqtest"
	"github.com/acemq/acemq-go/outbox/outboxtest"
	"github.com/acemq/acemq-go/typed"
)

// The whole file needs no broker (it needs PostgreSQL, for the inbox:
// PG_URL, default the local test database) and never sleeps: the ladder's
// waits (30 s in TestCarrierFailuresAreRetried alone) are recorded by the
// fake, not waited. TestMain holds it to a third of those waits, a bound
// that a loaded machine with the race detector still meets (it takes
// about a second, mostly creating each test's PostgreSQL schema) and that
// any real wait breaks.
func TestMain(m *testing.M) {
	began := time.Now()
	code := m.Run()
	if took := time.Since(began); took > 10*time.Second && code == 0 {
		fmt.Fprintf(os.Stderr, "the handler tests took %v: something waited for real\n", took)
		code = 1
	}
	os.Exit(code)
}

// fakeCarrier fails the first `fail` bookings.
type fakeCarrier struct{ fail, calls int }

func (c *fakeCarrier) Book(_ context.Context, o Order) (string, error) {
	c.calls++
	if c.calls <= c.fail {
		return "", errors.New("carrier timeout")
	}
	return "TRK-" + o.ID, nil
}

// consumer runs the shipping handler exactly as the app does: the chain
// fxmodule would run the consumer with, the inbox included, over a
// PostgreSQL schema of the test's own with the service's tables
// (outboxtest), and a fake of the publisher fxmodule.AsPublisher provides,
// routing through the service's topology with the module's options. An
// announcement the broker would return unroutable fails here as it would
// there. It returns the test's database too.
func consumer(t *testing.T, carrier Carrier) (*mqtest.Consumer, *mqtest.Publisher, *sql.DB) {
	t.Helper()
	db := outboxtest.New(t, Tables)
	if err := createTables(t.Context(), db.DB); err != nil {
		t.Fatal(err)
	}
	events := fxmoduletest.Publisher(Topology(), Exchange)
	s := &Shipping{Events: events, Carrier: carrier, Log: mqtestLogger()}
	return fxmoduletest.ConsumerWithInbox(t, db.Inbox(), s.Consumer(), Topology()), events, db.DB
}

func order(t *testing.T, o Order) mq.Message {
	t.Helper()
	m, err := typed.Encode(o)
	if err != nil {
		t.Fatal(err)
	}
	m.MessageId = "order.placed:" + o.ID // the inbox's key, as placeOrder sets it
	return m
}

func TestShipsAndAnnounces(t *testing.T) {
	c, events, _ := consumer(t, &fakeCarrier{})
	r := c.Deliver(order(t, Order{ID: "o-1", Address: "1 Main St", Items: 2}))
	if r.Outcome != mq.OutcomeAck {
		t.Fatalf("result %v (%v), want ack", r, r.Err)
	}
	sent := events.Messages()
	// Nobody in this service subscribes to order.shipped: an event without
	// an audience (yet) is taken and dropped, not an error.
	if len(sent) != 1 || sent[0].RoutingKey != "order.shipped" || len(sent[0].Queues) != 0 || sent[0].Message.ContentType != "application/json" ||
		string(sent[0].Message.Body) != `{"order_id":"o-1","tracking":"TRK-o-1"}` {
		t.Fatalf("published %+v", sent)
	}
}

// A carrier that fails twice: two in-process retries (10 s, 20 s on the
// fake clock), shipped on attempt 3.
func TestCarrierFailuresAreRetried(t *testing.T) {
	c, events, _ := consumer(t, &fakeCarrier{fail: 2})
	r := c.Deliver(order(t, Order{ID: "o-2", Address: "2 Main St"}))
	if r.Outcome != mq.OutcomeAck || r.Attempts != 3 || !slices.Equal(r.Waits, []time.Duration{10 * time.Second, 20 * time.Second}) {
		t.Fatalf("result %v, waits %v", r, r.Waits)
	}
	if len(events.Messages()) != 1 {
		t.Fatalf("announced %d times", len(events.Messages()))
	}
}

// A carrier that keeps failing: the broker rungs, then .dlq.
func TestCarrierDownEndsInTheDeadLetterQueue(t *testing.T) {
	c, events, _ := consumer(t, &fakeCarrier{fail: 1000})
	rs := c.Run(order(t, Order{ID: "o-3", Address: "3 Main St"}))
	last := rs[len(rs)-1]
	var path []string
	for _, h := range c.Hops() {
		path = append(path, h.Queue)
	}
	want := []string{"shipping.orders.retry.40s", "shipping.orders.retry.80s", "shipping.orders.dlq"}
	if last.Outcome != mq.OutcomeDeadLetter || !slices.Equal(path, want) {
		t.Fatalf("path %v, last %v; want %v", path, last, want)
	}
	if dl := last.Hops[0]; dl.Reason() != mq.ReasonExhausted || dl.Error() != "book a parcel for order o-3: carrier timeout" {
		t.Fatalf("dead letter reason %q, error %q", dl.Reason(), dl.Error())
	}
	if len(events.Messages()) != 0 {
		t.Fatal("an order that was not shipped was announced")
	}
}

func TestOrderWithoutAddressIsParked(t *testing.T) {
	carrier := &fakeCarrier{}
	c, _, _ := consumer(t, carrier)
	r := c.Deliver(order(t, Order{ID: "o-4"}))
	if r.Outcome != mq.OutcomePark || r.Hops[0].Queue != "shipping.orders.parked" || r.Hops[0].Error() != "order o-4: order has no delivery address" {
		t.Fatalf("result %v", r)
	}
	if carrier.calls != 0 || r.Attempts != 1 {
		t.Fatalf("carrier called %d times, %d attempts", carrier.calls, r.Attempts)
	}
}

func TestUndecodableOrderIsRejected(t *testing.T) {
	c, _, _ := consumer(t, &fakeCarrier{})
	r := c.Deliver(mq.Message{MessageId: "m-bad", Body: []byte("not json")})
	if r.Outcome != mq.OutcomeDeadLetter || r.Attempts != 1 || r.Hops[0].Reason() != mq.ReasonRejected {
		t.Fatalf("result %v", r)
	}
}

// The app wires: every constructor's dependencies are there.
func TestAppWiring(t *testing.T) {
	if err := fx.ValidateApp(fx.NopLogger, app()); err != nil {
		t.Fatal(err)
	}
}

func mqtestLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// The shipment is written in the inbox's transaction: once, however often
// order.placed arrives.
func TestShipmentIsRecordedOnce(t *testing.T) {
	c, events, db := consumer(t, &fakeCarrier{})
	m := order(t, Order{ID: "o-5", Address: "5 Main St"})
	if r := c.Deliver(m); r.Outcome != mq.OutcomeAck || r.Attempts != 1 {
		t.Fatalf("first delivery: %v", r)
	}
	if r := c.Deliver(m); r.Outcome != mq.OutcomeAck || r.Attempts != 0 {
		t.Fatalf("redelivery: %v, want acknowledged without shipping again", r)
	}
	var n int
	if err := db.QueryRow("SELECT count(*) FROM " + ShipmentsTable + " WHERE order_id = 'o-5'").Scan(&n); err != nil || n != 1 || len(events.Messages()) != 1 {
		t.Fatalf("%d shipments (%v), %d announcements; want one of each", n, err, len(events.Messages()))
	}
}
