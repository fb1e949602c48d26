package outbox

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// batchTx is the transaction of one relay batch: claim opens it, blockers
// reads in it, finish records the refusals, deletes the published rows and
// commits. sqlTx runs it through database/sql, with any driver; pgxTx on
// a pgx connection, in fewer round trips.
type batchTx interface {
	// claim locks and reads up to limit due rows (relayQueries.claim,
	// which also bounds the transaction on the server to ms
	// milliseconds), after relayQueries.indexOrder when backlog.
	claim(ctx context.Context, backlog bool, limit int, ms string) ([]*row, error)
	// blockers runs relayQueries.blockers with keys (keysArg).
	blockers(ctx context.Context, keys string) ([]keyed, error)
	// finish records each refusal, deletes the rows done and commits; an
	// error of the commit itself is a commitError. next asks it to claim
	// the next batch's rows (as claim would, with backlog) right after the
	// commit, when it can do so at no cost of its own (pgxTx: in the same
	// round trip); the next claim then returns them.
	finish(ctx context.Context, refusals []refusal, done []int64, next bool) error
}

// resultRows is the rows a claim or blockers statement returned, as
// database/sql (*sql.Rows) and pgx (pgx.Rows) both give them.
type resultRows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}

// scanClaimed reads the claim's rows (relayQueries.claim's columns).
func scanClaimed(res resultRows) ([]*row, error) {
	var rows []*row
	for res.Next() {
		rw := &row{}
		if err := res.Scan(&rw.id, &rw.exchange, &rw.key, &rw.ordering, &rw.body, &rw.props, &rw.trace, &rw.attempts); err != nil {
			return nil, err
		}
		rows = append(rows, rw)
	}
	return rows, res.Err()
}

// scanKeyed reads relayQueries.blockers' rows.
func scanKeyed(res resultRows) ([]keyed, error) {
	var found []keyed
	for res.Next() {
		var k keyed
		if err := res.Scan(&k.id, &k.key); err != nil {
			return nil, err
		}
		found = append(found, k)
	}
	return found, res.Err()
}

// idsArg is ids as a PostgreSQL array literal, "{1,2,3}": the argument of
// relayQueries.del, which casts it ($1::text::bigint[]). A list goes to
// the server as one text value because that is the one form every
// database/sql driver takes as it is: a Go slice is pgx's alone (lib/pq
// refuses []int64: "unsupported type"), and a placeholder per element
// would make a statement of its own for each batch size, bounded by the
// protocol's 65535 parameters. Integers need no quoting.
func idsArg(ids []int64) string {
	b := make([]byte, 0, 2+len(ids)*8)
	b = append(b, '{')
	for i, id := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, id, 10)
	}
	return string(append(b, '}'))
}

// keysArg is the argument of relayQueries.blockers: each ordering key with
// the largest id of this batch's rows of it, as a JSON array of objects
// {"key": …, "maxid": …} the statement reads with jsonb_to_recordset (one
// text value, as idsArg, for every driver; JSON rather than a text array
// literal, whose quoting of a key's quotes, backslashes, commas and braces
// would be hand-written here).
func keysArg(maxID map[string]int64) string {
	type entry struct {
		Key   string `json:"key"`
		MaxID int64  `json:"maxid"`
	}
	list := make([]entry, 0, len(maxID))
	for k, id := range maxID {
		list = append(list, entry{k, id})
	}
	b, _ := json.Marshal(list) // strings and integers: cannot fail
	return string(b)
}

// commitError is a batch's commit that failed.
type commitError struct{ err error }

func (e commitError) Error() string { return "outbox: commit: " + e.err.Error() }
func (e commitError) Unwrap() error { return e.err }

// sqlTx is a batch's transaction through database/sql: a round trip a
// statement, with any driver.
type sqlTx struct {
	q  *relayQueries
	tx *sql.Tx
}

func (t *sqlTx) claim(ctx context.Context, backlog bool, limit int, ms string) ([]*row, error) {
	if backlog {
		if _, err := t.tx.ExecContext(ctx, t.q.indexOrder); err != nil {
			return nil, err
		}
	}
	res, err := t.tx.QueryContext(ctx, t.q.claim, limit, ms)
	if err != nil {
		return nil, err
	}
	defer res.Close()
	return scanClaimed(res)
}

func (t *sqlTx) blockers(ctx context.Context, keys string) ([]keyed, error) {
	res, err := t.tx.QueryContext(ctx, t.q.blockers, keys)
	if err != nil {
		return nil, err
	}
	defer res.Close()
	return scanKeyed(res)
}

func (t *sqlTx) finish(ctx context.Context, refusals []refusal, done []int64, _ bool) error {
	for _, f := range refusals {
		if _, err := t.tx.ExecContext(ctx, t.q.fail, f.args()...); err != nil {
			return fmt.Errorf("outbox: record refused row %d: %w", f.rw.id, err)
		}
	}
	if len(done) > 0 {
		if _, err := t.tx.ExecContext(ctx, t.q.del, idsArg(done)); err != nil {
			return fmt.Errorf("outbox: delete published rows: %w", err)
		}
	}
	if err := t.tx.Commit(); err != nil {
		return commitError{err}
	}
	return nil
}

// pgxTx is a batch's transaction on the pgx connection under a
// database/sql one (sql.Conn.Raw): begin, the settings and the claim are
// sent together, as are the refusals, the delete and the commit (a pgx
// batch: one round trip each), so a batch costs the database two round
// trips rather than four or five; while a backlog drains, the next
// batch's begin and claim go with the commit, one round trip a batch. The
// statements and what they do are sqlTx's. The connection goes back to
// db's pool only once its transaction has ended (end).
type pgxTx struct {
	q *relayQueries
	c *pgx.Conn
	// The claim's arguments, for the next batch's claimed in finish.
	limit int
	ms    string
	next  []*row // the next batch's rows, claimed by finish
}

// queueClaim queues the statements of a claim on b.
func (t *pgxTx) queueClaim(b *pgx.Batch, backlog bool) {
	b.Queue("begin")
	if backlog {
		b.Queue(t.q.indexOrder)
	}
	b.Queue(t.q.claim, t.limit, t.ms)
}

// readClaim reads the results of queueClaim's statements from br.
func readClaim(br pgx.BatchResults, backlog bool) ([]*row, error) {
	if _, err := br.Exec(); err != nil {
		return nil, err
	}
	if backlog {
		if _, err := br.Exec(); err != nil {
			return nil, err
		}
	}
	res, err := br.Query()
	if err != nil {
		return nil, err
	}
	defer res.Close()
	return scanClaimed(res)
}

func (t *pgxTx) claim(ctx context.Context, backlog bool, limit int, ms string) ([]*row, error) {
	if rows := t.next; len(rows) > 0 {
		t.next = nil
		return rows, nil
	}
	t.limit, t.ms = limit, ms
	b := &pgx.Batch{}
	t.queueClaim(b, backlog)
	br := t.c.SendBatch(ctx, b)
	defer br.Close() //nolint:errcheck // the results are read and checked below
	rows, err := readClaim(br, backlog)
	if err != nil {
		return nil, err
	}
	return rows, br.Close()
}

func (t *pgxTx) blockers(ctx context.Context, keys string) ([]keyed, error) {
	res, err := t.c.Query(ctx, t.q.blockers, keys)
	if err != nil {
		return nil, err
	}
	defer res.Close()
	return scanKeyed(res)
}

func (t *pgxTx) finish(ctx context.Context, refusals []refusal, done []int64, next bool) error {
	b := &pgx.Batch{}
	for _, f := range refusals {
		b.Queue(t.q.fail, f.args()...)
	}
	if len(done) > 0 {
		b.Queue(t.q.del, idsArg(done))
	}
	b.Queue("commit")
	if next {
		t.queueClaim(b, true)
	}
	br := t.c.SendBatch(ctx, b)
	defer br.Close() //nolint:errcheck // the results are read and checked below
	// After a statement fails the server skips the rest (the commit too)
	// and the transaction stays open, aborted: end rolls it back.
	for _, f := range refusals {
		if _, err := br.Exec(); err != nil {
			return fmt.Errorf("outbox: record refused row %d: %w", f.rw.id, err)
		}
	}
	if len(done) > 0 {
		if _, err := br.Exec(); err != nil {
			return fmt.Errorf("outbox: delete published rows: %w", err)
		}
	}
	tag, err := br.Exec()
	if err == nil && tag.String() != "COMMIT" {
		// A commit of a failed transaction answers ROLLBACK, not an error.
		err = fmt.Errorf("the transaction was rolled back (%s)", tag)
	}
	if err != nil {
		return commitError{err}
	}
	if next {
		// This batch has committed, whatever the next claim does: a claim
		// that failed is only not made (end rolls back what it began; the
		// loop's next batch claims again, and reports what fails).
		rows, err := readClaim(br, true)
		if err != nil {
			rows = nil
		}
		t.next = rows
	}
	if err := br.Close(); err != nil {
		t.next = nil
		if !next {
			return commitError{err}
		}
	}
	return nil
}

// end is what pgxTx's connection goes back to the pool as: nil once its
// transaction has ended (rolled back here when the batch failed before its
// commit), else driver.ErrBadConn, so that database/sql closes it rather
// than lend a connection in a transaction, or in an unknown state.
func (t *pgxTx) end(ctx context.Context) error {
	pc := t.c.PgConn()
	if pc.IsClosed() {
		return driver.ErrBadConn
	}
	if pc.TxStatus() == 'I' {
		return nil
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if _, err := t.c.Exec(rctx, "rollback"); err != nil || pc.TxStatus() != 'I' {
		return driver.ErrBadConn
	}
	return nil
}
