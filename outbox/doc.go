// Package outbox makes a service's effects happen once although the broker
// delivers at least once: a transactional outbox for what a service
// publishes, and an idempotent inbox for what it consumes, both on
// PostgreSQL through database/sql.
//
// # The outbox
//
// Outbox.Publish writes a message (exchange, routing key, body, every
// property and header byte for byte, and the trace context of the caller's
// span) into the outbox table inside the caller's *sql.Tx (with WithNotify,
// it also asks PostgreSQL to notify the relays when that transaction
// commits). Nothing reaches the broker unless the transaction commits; once
// it has committed, the message is not lost. A Relay publishes committed
// rows through a confirmed mq.Publisher and deletes each row only after the
// broker confirmed it. It finds new rows by probing the table's newest
// pending row every few milliseconds (and wakes on LISTEN/NOTIFY, and claims
// every PollInterval); any number of relays (one per service instance)
// share a table: rows are claimed with FOR UPDATE SKIP LOCKED, so no two
// relays send one row at once. A row the broker refuses
// or cannot route is tried again with backoff, and after MaxAttempts set
// aside (set_aside_at, attempts and last_error say so, in the table) and
// logged (EventSetAside); it is never deleted by the relay.
//
// Delivery is at least once: a relay killed between the broker's confirm
// and its delete sends the row again. Order is promised per ordering key
// only (OrderBy; by default rows have none and go out in parallel): of two
// rows with one key, when the transaction that wrote the first committed
// before the second was written (or both are in one transaction, in
// write order), the first is confirmed by the broker before the second is
// sent. A row whose publish lost its connection before the confirm is sent
// again (a relay deletes it only once a copy is confirmed), and the
// connection it was first written to is reset, not closed, so that neither
// the kernel nor a TCP proxy or load balancer that passes resets on
// delivers that first copy later, behind the key's next row (mq: a
// connection given up is reset). Every copy of a row carries its message
// id, so where a path still delivers one late, an inbox keyed by message
// id acknowledges it as a duplicate once the copy sent again was handled;
// see docs/reliability.md. Rows of different keys never wait for each
// other: the relay claims no row whose key's first pending row waits for
// its retry. A relay claims nothing while its broker has no connection,
// and the database ends the transaction of a relay that froze holding
// rows after PublishTimeout.
//
// # The inbox
//
// Inbox is a middleware that runs the handler inside a database
// transaction which also records the message's key (its message id by
// default, KeyBy to choose), per queue. The handler reaches that
// transaction with Tx(ctx), so its own writes commit together with the
// record, or not at all; a delivery whose key is already recorded is
// acknowledged without calling the handler (EventDuplicate). A message
// without a key is refused (ErrNoKey) at the first one. Records older than
// Retention are deleted. Any key can be recorded (one that is not UTF-8
// text, or is long, by its hash). A database that cannot be reached is
// waited out, the delivery held in the consumer (EventInboxFailed); a
// failure that is the delivery's own (its deadline, a transaction its
// handler's failed statement aborted: ErrTxAborted) goes down the retry
// ladder.
//
// The key is the caller's choice and the inbox trusts it: two different
// messages with one key on one queue are one message to the inbox, and the
// second is acknowledged unhandled. Message ids are not unique in the wild
// (clients that reuse them, a producer's retries that mint a new one), so a
// service whose producers it does not control keys by what makes a message
// the same business event (an order number and event type, say).
//
// What the inbox cannot make once: effects outside the database (an email,
// an HTTP call to a carrier). Those happen as often as the handler runs;
// see docs/outbox.md.
//
// # fx
//
// Module provides the *Outbox, runs a Relay with an fx app's lifecycle
// (after fxmodule.Module) and provides the inbox that an
// fxmodule.Consumer with Inbox set runs in, all three on the one schema
// given to it; its start fails, naming the table, when a table it needs is
// missing or of another shape. AsSender provides an outbox-backed
// mq.Sender interface, fxmodule.AsPublisher's counterpart: a row to a
// topic, fanout or headers exchange of the app's topology is an event,
// dropped when no queue is bound for it, any other a command (mandatory;
// WithTopology without fx), and start fails naming an exchange a sender
// names that neither exists nor is declared. See docs/outbox.md.
//
// Module also feeds the relay's Check and InboxCheck to
// fxmodule.ReadyHandler, so /readyz answers for the database, reports the
// relay's oldest pending row, and is not ready while the relay's rows keep
// failing. Package outboxtest runs a handler that uses Tx inside the
// inbox against a schema of the test's own.
//
// # Options
//
// Each constructor takes its own option type (OutboxOption, RelayOption,
// InboxOption), so an option given to a constructor it does not apply to
// does not compile; Module takes every Option.
//
// # Schema
//
// Schema.Create makes the tables (names configurable, Schema.SQL prints
// them for a migration tool of the service's own); replicas may run it at
// once (it takes an advisory lock). Schema.Check makes sure they are there,
// of the right shape, and creates nothing; Relay.Run checks the outbox
// table before it relays, and an inbox its table before its consumer
// first subscribes, so a missing one fails Run or Consume at once.
//
// What it owns: the outbox and inbox tables and what is written to and read
// from them (their checks, at start and for readiness, included), the
// relay's loop and its LISTEN connection, and the inbox's transaction. What it must not touch: broker connections and channels
// (the relay publishes through mq.Publisher, as any service does), the
// caller's transaction beyond the rows it writes (Publish never commits or
// rolls back), and package mq, which must not import a database driver:
// only this package imports pgx (for LISTEN, and for the relay's batches,
// which go in fewer round trips when db's driver is pgx's: any other
// driver, lib/pq say, takes database/sql's path), and only its importers
// compile it.
package outbox
