package outbox

import "errors"

// Sentinel errors, for errors.Is.
var (
	// ErrNoTx: a publish through Sender, or Tx's caller, found no
	// transaction in its context (see WithTx and Inbox).
	ErrNoTx = errors.New("outbox: no transaction in the context")
	// ErrNoKey: a delivery reached the inbox without a key (no message id,
	// or KeyBy returned ""). The inbox refuses it (middleware.Reject), so a
	// retry ladder sends it to the dead-letter queue at once.
	ErrNoKey = errors.New("outbox: inbox: message has no key (no message id; give KeyBy)")
	// ErrTxAborted: an inbox handler returned nil, but a statement of its
	// transaction had failed (a unique violation it tolerated, say), which
	// aborts a PostgreSQL transaction: COMMIT rolled back, nothing of the
	// attempt (nor its record) was committed. The attempt fails with it and
	// goes down the retry ladder. Let a statement that may fail run inside a
	// SAVEPOINT, or avoid the failure (INSERT … ON CONFLICT DO NOTHING).
	ErrTxAborted = errors.New("outbox: inbox: the handler returned nil, but a failed statement had aborted its transaction, so nothing was committed (use ON CONFLICT or a SAVEPOINT for a statement that may fail)")
	// ErrSchema: a table name that is not a plain identifier, or (Check,
	// and so the start of outbox.Module and Relay.Run) a table that does
	// not exist or lacks a column this package uses.
	ErrSchema = errors.New("outbox: bad schema")
	// ErrHeader: a header value of a type AMQP tables cannot carry; the
	// row is not written.
	ErrHeader = errors.New("outbox: header value cannot be stored")
)

// The package's events: the message of the log record the package writes
// when they happen, greppable and named in the contract's style.
const (
	// EventDuplicate: the inbox acknowledged a delivery whose key it had
	// recorded, without calling the handler.
	EventDuplicate = "acemq.inbox.duplicate"
	// EventPublishFailed: the broker refused a row or could not route it;
	// the relay tries it again after a backoff.
	EventPublishFailed = "acemq.outbox.publish.failed"
	// EventSetAside: the relay gave up on a row after MaxAttempts (or at
	// once for a message the wire cannot carry or the broker refuses with
	// 406): set_aside_at is set, the
	// row stays in the table for a person to look at.
	EventSetAside = "acemq.outbox.set.aside"
	// EventRelayFailed: a relay's batch failed on the database, ran out
	// of PublishTimeout or lost its broker connection, or the relay found
	// its broker without a connection (logged once per outage; it claims
	// nothing until the broker is back); the rows are as they were and the
	// relay tries again after a pause.
	EventRelayFailed = "acemq.outbox.relay.failed"
	// EventInboxFailed: the inbox's own statements failed because the
	// database is unreachable (or misconfigured: a table dropped while its
	// consumer runs); the delivery waits in the consumer and is tried
	// again after a backoff. Also logged when the database does not answer
	// the inbox's table check before its consumer first subscribes (the
	// consumer starts). A
	// failure that is the delivery's own (its deadline, an aborted
	// transaction, a refused value) is not logged so: it goes down the
	// retry ladder.
	EventInboxFailed = "acemq.inbox.failed"
)
