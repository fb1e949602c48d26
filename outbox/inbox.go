package outbox

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/acemq/acemq-go/middleware"
	"github.com/acemq/acemq-go/mq"
)

// cleanEvery is how often at most an inbox deletes expired records, and
// cleanBatch how many at most each time.
const (
	cleanEvery = time.Minute
	cleanBatch = 10000
)

// Inbox returns a middleware that makes a handler's database effects
// happen once per message key (the message id by default, see KeyBy):
// each delivery runs in a transaction of db that first records its key for
// its queue; the handler reaches the transaction with Tx(ctx), and what it
// writes with it commits together with the record when it returns nil, or
// rolls back with the record when it returns an error (so a retry runs it
// again). A delivery whose key is recorded already is acknowledged without
// calling the handler, and logged (EventDuplicate, at info) and counted
// (MetricDuplicates). Two deliveries of one key at once: the second waits
// for the first's transaction, then runs only if that rolled back.
//
// When the inbox's own statements (its begin, its record, its commit) fail
// because the database is not there (a connection refused, reset or lost,
// the server shutting down, too many connections, a missing table), the
// delivery is not the one to blame: it is not sent down the retry ladder,
// nor returned to its queue (which RabbitMQ 4.x counts towards a quorum
// queue's delivery limit), but waits in the consumer, tried again after
// 50 ms, doubling, at most 5 s (EventInboxFailed each time), until the
// database answers; only a stop or a lost channel (Delivery.Draining) or
// the end of its context returns it (mq.Requeue). A retry after a failed
// commit runs the handler again (a commit that did go through makes it a
// duplicate). A failure of one of them that is this delivery's own is
// returned for the retry ladder instead: the attempt's deadline passed
// (middleware.Timeout) before the commit; a failed statement of the
// handler's aborted the transaction, so the commit rolled back
// (ErrTxAborted); PostgreSQL refused one of its values
// (middleware.Reject). The handler's own errors are the handler's.
//
// Every key can be recorded: one PostgreSQL's text cannot hold (not
// UTF-8, a NUL byte) or longer than 2048 bytes is recorded by its SHA-256
// (see Schema.SQL), one key always one record.
//
// A delivery without a key is refused with middleware.Reject(ErrNoKey)
// (a retry ladder sends it to the dead-letter queue at once). Records
// older than Retention are deleted, at most once a minute, by a
// delivery on its way through.
//
// Place it inside the retry ladder (innermost, next to the handler), so
// each attempt is a transaction of its own. Options: KeyBy, Retention,
// WithSchema, WithMeterProvider. It logs to the delivery's logger
// (Delivery.Logger, the consumer's). Its table must exist
// (Schema.Create): before its consumer first subscribes it checks the
// table, and Consume fails with ErrSchema naming it with its schema when
// it is missing or of another shape; a database that does not answer
// then, or a table dropped while the consumer runs, is an outage. With fx,
// fxmodule.Consumer.Inbox runs the inbox Module provides, whose start
// checks the tables before any consumer starts.
func Inbox(db *sql.DB, opts ...InboxOption) mq.Middleware {
	c := newConfig(opts, InboxOption.applyInbox)
	s, serr := c.schema.resolved()
	in := &inbox{db: db, c: c, err: serr,
		record: fmt.Sprintf(`INSERT INTO %s (queue, key) VALUES ($1, $2) ON CONFLICT DO NOTHING`, s.Inbox),
		clean: fmt.Sprintf(`DELETE FROM %[1]s WHERE ctid IN (SELECT ctid FROM %[1]s WHERE received_at < now() - make_interval(secs => $1) LIMIT %[2]d)`,
			s.Inbox, cleanBatch),
	}
	var err error
	if in.dups, err = meter(c.mp).Int64Counter(MetricDuplicates, metric.WithUnit("{message}"),
		metric.WithDescription("Deliveries the inbox acknowledged without calling the handler: their key was recorded.")); err != nil {
		otel.Handle(err)
		in.dups = noop.Int64Counter{}
	}
	return func(next mq.Handler) mq.Handler { return &inboxHandler{in: in, next: next} }
}

type inbox struct {
	db            *sql.DB
	c             config
	err           error
	record, clean string
	dups          metric.Int64Counter
	lastClean     atomic.Int64 // unix nanoseconds
}

type inboxHandler struct {
	in   *inbox
	next mq.Handler
}

func (h *inboxHandler) Handle(ctx context.Context, d *mq.Delivery) error {
	in := h.in
	if in.err != nil {
		return in.err
	}
	key := d.MessageId
	if in.c.keyBy != nil {
		key = in.c.keyBy(d)
	}
	if key == "" {
		return middleware.Reject(fmt.Errorf("queue %q: %w", d.Queue(), ErrNoKey))
	}
	in.maybeClean(ctx, d)
	pause := 50 * time.Millisecond
	for {
		err := h.once(ctx, d, key)
		var out *outage
		if !errors.As(err, &out) {
			return err
		}
		// The database failed, not the message: wait here rather than
		// return the delivery to its queue, where every return counts
		// towards a quorum queue's delivery limit on RabbitMQ 4.x.
		d.Logger().LogAttrs(ctx, slog.LevelWarn, EventInboxFailed, slog.String("key", key),
			slog.Duration("retry_in", pause), slog.Any("error", out.err))
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return mq.Requeue(out.err)
		case <-d.Draining():
			t.Stop()
			return mq.Requeue(out.err)
		case <-t.C:
		}
		pause = min(pause*2, 5*time.Second)
	}
}

// subscribeCheck bounds the inbox's table check before its consumer's
// first subscribe: a database that has not answered by then is an outage.
const subscribeCheck = 5 * time.Second

// Subscribe checks the inbox table before its consumer first subscribes
// (mq.Subscriber), as Schema.Check does: a table that is missing or lacks
// a column the inbox uses fails Consume with an error matching ErrSchema
// that names it with its schema, since no wait would end that. A database
// that cannot be reached is an outage, not a reason to refuse the
// consumer: it is logged (EventInboxFailed) and the consumer starts, its
// deliveries waiting for the database. A resubscribe checks nothing.
func (h *inboxHandler) Subscribe(ctx context.Context, s *mq.Subscription) error {
	in := h.in
	if in.err != nil {
		return in.err
	}
	if s.Resubscribe {
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, subscribeCheck)
	defer cancel()
	err := in.c.schema.check(cctx, in.db, false, true)
	if err == nil || errors.Is(err, ErrSchema) || ctx.Err() != nil {
		return err
	}
	s.Logger.LogAttrs(ctx, slog.LevelWarn, EventInboxFailed, slog.Any("error", err))
	return nil
}

// outage is an error of the inbox's own statements that is the database's
// (unreachable, shutting down, misconfigured), not the message's: the
// delivery waits for the database and is tried again.
type outage struct{ err error }

func (o *outage) Error() string { return o.err.Error() }
func (o *outage) Unwrap() error { return o.err }

// once runs the delivery in one transaction: record, handler, commit. An
// error of the database's own is an *outage, to be waited out; any other
// error is this delivery's: the handler's, or a statement of the inbox's
// that failed for this message (its context ended, its transaction was
// aborted, a value was refused), for the retry ladder.
func (h *inboxHandler) once(ctx context.Context, d *mq.Delivery, key string) error {
	in := h.in
	tx, err := in.db.BeginTx(ctx, nil)
	if err != nil {
		return in.failed(ctx, "begin", key, err)
	}
	res, err := tx.ExecContext(ctx, in.record, d.Queue(), storedKey(key))
	if err != nil {
		_ = tx.Rollback()
		return in.failed(ctx, "record", key, err)
	}
	if n, err := res.RowsAffected(); err == nil && n == 0 {
		_ = tx.Rollback()
		in.dups.Add(ctx, 1)
		d.Logger().LogAttrs(ctx, slog.LevelInfo, EventDuplicate,
			slog.String("key", key), slog.String("message_id", d.MessageId))
		return nil
	}
	if err := h.next.Handle(WithTx(ctx, tx), d); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		// Committed or not, running it again is safe: a committed record
		// makes the next try a duplicate.
		return in.failed(ctx, "commit", key, err)
	}
	return nil
}

// failed says whose the failure of one of the inbox's statements (begin,
// record, commit) is. The delivery's: its context ended (a deadline:
// middleware.Timeout; at a stop the delivery goes back to its queue), its
// transaction was aborted by a failed statement of the handler's
// (ErrTxAborted), or PostgreSQL refused this message's values (a data
// exception, SQLSTATE class 22; a limit, 54; a constraint, 23): returned
// for the retry ladder, a refused value with middleware.Reject as no retry
// can help it; a serialization failure or deadlock (class 40) as it is,
// for a retry. Anything else, a connection refused, reset or lost, the
// server shutting down (class 08, 57P01-57P03), too many connections, a
// missing table or privilege: an *outage, waited out.
func (in *inbox) failed(ctx context.Context, stmt, key string, err error) error {
	wrapped := fmt.Errorf("outbox: inbox: %s %q: %w", stmt, key, err)
	if cerr := ctx.Err(); cerr != nil {
		if errors.Is(cerr, context.DeadlineExceeded) {
			return fmt.Errorf("outbox: inbox: key %q: the attempt's deadline passed before its %s, nothing was committed: %w (%w)", key, stmt, cerr, err)
		}
		return mq.Requeue(wrapped)
	}
	if abortedCommit(err) {
		return fmt.Errorf("%w (key %q)", ErrTxAborted, key)
	}
	if code := sqlState(err); len(code) == 5 {
		switch code[:2] {
		case "25": // an aborted transaction (25P02), an invalid transaction state
			return fmt.Errorf("%w (key %q): %w", ErrTxAborted, key, err)
		case "22", "23", "54":
			return middleware.Reject(fmt.Errorf("outbox: inbox: PostgreSQL refused the message's %s (SQLSTATE %s): %w", stmt, code, wrapped))
		case "40": // a serialization failure or a deadlock: the attempt may try again
			return wrapped
		}
	}
	return &outage{wrapped}
}

// sqlState is the SQLSTATE of the PostgreSQL error in err's chain, "" when
// there is none. Drivers say it with a method of this name (pgx's
// *pgconn.PgError, lib/pq's *pq.Error), so the inbox reads every driver's
// without importing any.
func sqlState(err error) string {
	if e, ok := errors.AsType[interface {
		error
		SQLState() string
	}](err); ok {
		return e.SQLState()
	}
	return ""
}

// abortedCommit reports whether err is a driver's answer to the commit of
// a transaction a failed statement aborted, which the server rolls back:
// pgx's ErrTxCommitRollback, or lib/pq's ErrInFailedTransaction, a plain
// error known only by its text (lib/pq rolls back without asking the
// server, so there is no SQLSTATE).
func abortedCommit(err error) bool {
	return errors.Is(err, pgx.ErrTxCommitRollback) ||
		strings.Contains(err.Error(), "pq: Could not complete operation in a failed transaction")
}

// maxKeyText is the longest key the inbox records as it is; a longer one
// is recorded by its hash, so (queue, key) always fits the primary key's
// btree (at most 2704 bytes with a queue name of up to 255).
const maxKeyText = 2048

// hashedKey begins a key recorded by its hash. No key recorded as it is
// begins with it (such a key is hashed too), so the two never meet.
const hashedKey = "\x01sha256:"

// storedKey is key as the inbox table records it: as it is when it is
// text PostgreSQL can hold (UTF-8 without NUL bytes) of at most
// maxKeyText bytes not beginning with hashedKey; else hashedKey and the
// hex SHA-256 of its bytes. One key always gives one stored key, and two
// keys two (but for a SHA-256 collision).
func storedKey(key string) string {
	if len(key) <= maxKeyText && isText(key) && !strings.HasPrefix(key, hashedKey) {
		return key
	}
	sum := sha256.Sum256([]byte(key))
	return hashedKey + hex.EncodeToString(sum[:])
}

// maybeClean deletes expired records when the last cleaning is a minute
// old; one delivery does it while the others go on.
func (in *inbox) maybeClean(ctx context.Context, d *mq.Delivery) {
	now := time.Now().UnixNano()
	last := in.lastClean.Load()
	if now-last < int64(cleanEvery) || !in.lastClean.CompareAndSwap(last, now) {
		return
	}
	if _, err := in.db.ExecContext(ctx, in.clean, in.c.retention.Seconds()); err != nil {
		d.Logger().LogAttrs(ctx, slog.LevelWarn, "acemq.inbox.clean.failed", slog.Any("error", err))
	}
}
