// Package outboxtest tests handlers that use the inbox's transaction
// (outbox.Tx) against a real PostgreSQL, in a schema of the test's own,
// without a broker: [New] creates a PostgreSQL schema holding the
// outbox's tables, hands out a *sql.DB whose every connection works in
// it, and drops it with everything in it when the test ends;
// [DB.Consumer] runs a handler inside outbox.Inbox on mqtest's fake
// consumer, so the handler gets the transaction it gets in production,
// commits or rolls back with it, and a message delivered twice has its
// effect once.
//
//	db := outboxtest.New(t)
//	c := db.Consumer(t, "billing.orders", bill) // bill uses outbox.Tx(ctx): no nil guard
//	m := mq.Message{MessageId: "o-1", Body: []byte(`{"id":"o-1"}`)}
//	c.Deliver(m) // runs bill, commits its writes with the inbox's record
//	c.Deliver(m) // a redelivery: acknowledged, bill not called
//
// An fx app's consumer with Inbox set runs with the same inbox in place
// of the app's, in one line: fxmoduletest.ConsumerWithInbox(t,
// db.Inbox(), consumer, topology).
//
// What it owns: the schema's life and the inbox's place in the chain
// (innermost, as the outbox package documents it); every decision is the
// inbox's and mqtest's. It lives in the outbox module, so that the core's
// test packages (mqtest, fxmoduletest) do not import pgx.
//
// PG_URL names the PostgreSQL (default
// postgres://postgres@127.0.0.1:5432/test?sslmode=disable, the one `make
// postgres` keeps); one that does not answer fails the test.
package outboxtest
