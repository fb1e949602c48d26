package outbox

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

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
// When the inbox's own statements fail (the database is unreachable: its
// begin, its record, its commit), the delivery is not the one to blame: it
// is not sent down the retry ladder, nor returned to its queue (which
// RabbitMQ 4.x counts towards a quorum queue's delivery limit), but waits
// in the consumer, tried again after 50 ms, doubling, at most 5 s
// (EventInboxFailed each time), until the database answers; only a stop
// or a lost channel (Delivery.Draining) or the end of its context returns
// it (mq.Requeue). A retry after a failed commit runs the handler again
// (a commit that did go through makes it a duplicate). The handler's own
// errors are the handler's.
//
// A delivery without a key is refused with middleware.Reject(ErrNoKey)
// (a retry ladder sends it to the dead-letter queue at once). Records
// older than Retention are deleted, at most once a minute, by a
// delivery on its way through.
//
// Place it inside the retry ladder (innermost, next to the handler), so
// each attempt is a transaction of its own. Options: KeyBy, Retention,
// WithSchema, WithLogger, WithMeterProvider. The tables must exist
// (Schema.Create).
func Inbox(db *sql.DB, opts ...Option) mq.Middleware {
	c := newConfig(opts)
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
		dbFailed, err := h.once(ctx, d, key)
		if !dbFailed {
			return err
		}
		// The database failed, not the message: wait here rather than
		// return the delivery to its queue, where every return counts
		// towards a quorum queue's delivery limit on RabbitMQ 4.x.
		in.logger(d).LogAttrs(ctx, slog.LevelWarn, EventInboxFailed, slog.String("queue", d.Queue()), slog.String("key", key),
			slog.Duration("retry_in", pause), slog.Any("error", err))
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return mq.Requeue(err)
		case <-d.Draining():
			t.Stop()
			return mq.Requeue(err)
		case <-t.C:
		}
		pause = min(pause*2, 5*time.Second)
	}
}

// once runs the delivery in one transaction: record, handler, commit. It
// says whether an error was the database's (begin, record, commit), to be
// tried again, rather than the handler's.
func (h *inboxHandler) once(ctx context.Context, d *mq.Delivery, key string) (dbFailed bool, err error) {
	in := h.in
	tx, err := in.db.BeginTx(ctx, nil)
	if err != nil {
		return true, fmt.Errorf("outbox: inbox: begin: %w", err)
	}
	res, err := tx.ExecContext(ctx, in.record, d.Queue(), key)
	if err != nil {
		_ = tx.Rollback()
		return true, fmt.Errorf("outbox: inbox: record %q: %w", key, err)
	}
	if n, err := res.RowsAffected(); err == nil && n == 0 {
		_ = tx.Rollback()
		in.dups.Add(ctx, 1)
		in.logger(d).LogAttrs(ctx, slog.LevelInfo, EventDuplicate,
			slog.String("queue", d.Queue()), slog.String("key", key), slog.String("message_id", d.MessageId))
		return false, nil
	}
	if err := h.next.Handle(WithTx(ctx, tx), d); err != nil {
		_ = tx.Rollback()
		return false, err
	}
	if err := tx.Commit(); err != nil {
		// Committed or not, running it again is safe: a committed record
		// makes the next try a duplicate.
		return true, fmt.Errorf("outbox: inbox: commit %q: %w", key, err)
	}
	return false, nil
}

func (in *inbox) logger(d *mq.Delivery) *slog.Logger {
	if in.c.log != nil {
		return in.c.log
	}
	return d.Logger()
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
		in.logger(d).LogAttrs(ctx, slog.LevelWarn, "acemq.inbox.clean.failed", slog.Any("error", err))
	}
}
