package outbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/acemq/acemq-go/fxmodule"
)

// RelayCheck is the readiness check of the relay's database, for
// fxmodule.ReadyHandler (Relay.Check adds the relay's own failures, and is
// what Module feeds the app): the outbox table must answer a query, or the service is
// not ready, with the database's error as the reason. Its detail is the
// age of the oldest pending row (the first in the order rows were written
// that is not set aside), how far behind the relays are. That age is
// reported, never a reason for not ready: every replica shares the table,
// so an old row would take all of them out of service at once, while the
// outbox keeps what they write until the relays catch up; a relay that
// cannot publish because the broker is down is not ready already through
// the broker's own check. Alert on MetricOldestAge instead. s names the
// tables, as WithSchema does.
func RelayCheck(db *sql.DB, s Schema) fxmodule.Check { return relayCheck(db, s, nil) }

// Check is the readiness check of this relay, for fxmodule.ReadyHandler
// (Module feeds it to the app; without fx, give it to ReadyHandler in
// place of RelayCheck): RelayCheck's, and not ready while this relay's
// rows keep failing — the broker refused its last 3 attempts or more (a
// missing exchange, a command no queue is bound for, a nack) and it has
// published no row since, while a row is pending — with the last refusal
// as the reason. Unlike a backlog, which drains by itself, such rows wait
// for a person (an exchange to declare, a binding to add, a name to
// correct). It is ready again once a row goes out, or when no row is
// pending (the failing ones were set aside: see docs/outbox.md).
func (r *Relay) Check() fxmodule.Check { return relayCheck(r.db, r.schema, r.failing) }

// relayCheck is RelayCheck, and with failing (nil: none) not ready while a
// row is pending and failing returns an error.
func relayCheck(db *sql.DB, s Schema, failing func() error) fxmodule.Check {
	s, err := s.resolved()
	q := "SELECT " + oldestAge(s.Outbox)
	return fxmodule.Check{Name: "outbox", Check: func(ctx context.Context) (string, error) {
		if err != nil {
			return "", err
		}
		var age sql.NullFloat64
		switch err := db.QueryRowContext(ctx, q).Scan(&age); {
		case err != nil:
			return "", fmt.Errorf("%s: %w", s.Outbox, err)
		case !age.Valid:
			return s.Outbox + ": no pending row", nil
		}
		if failing != nil {
			if err := failing(); err != nil {
				return "", fmt.Errorf("%s: %w", s.Outbox, err)
			}
		}
		return fmt.Sprintf("%s: oldest pending row %v old", s.Outbox, time.Duration(age.Float64*float64(time.Second)).Round(100*time.Millisecond)), nil
	}}
}

// failingAfter is how many refusals in a row, with no row published
// between them, make a relay's rows ones that keep failing (Relay.Check):
// one refusal is a moment's trouble (a binding being added); a row
// refused at its first three attempts (over 3 s) is not.
const failingAfter = 3

// failures counts a relay's refusals since it last published a row.
type failures struct {
	mu    sync.Mutex
	n     int       // refusals since the last row published
	since time.Time // the first of them
	last  refusal   // the latest
}

// note records a batch's outcome: published rows end a run of failures;
// refused ones, with none published, extend it.
func (f *failures) note(published int, refused []refusal) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case published > 0:
		f.n = 0
	case len(refused) > 0:
		if f.n == 0 {
			f.since = time.Now()
		}
		f.n += len(refused)
		f.last = refused[len(refused)-1]
	}
}

// failing is an error saying so while the relay's rows keep failing (see
// failingAfter), nil otherwise.
func (r *Relay) failing() error {
	f := &r.fails
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n < failingAfter {
		return nil
	}
	rw := f.last.rw
	return fmt.Errorf("the relay's rows keep failing: %d attempts refused since %s, none published; the last, row %d to exchange %q with key %q (attempt %d): %w",
		f.n, f.since.UTC().Format(time.RFC3339), rw.id, rw.exchange, rw.key, f.last.attempts, rw.err)
}

// oldestAge is the SQL of the age, in seconds, of table's oldest pending
// row: the first not set aside in the order rows were written (id), the
// next the relays send (NULL when none is pending). RelayCheck's detail
// and MetricOldestAge both read it, so the two always name the same row;
// it reads one entry of the pending index, not the table.
func oldestAge(table string) string {
	return fmt.Sprintf(`(SELECT EXTRACT(EPOCH FROM now() - created_at)::float8 FROM %s WHERE set_aside_at IS NULL ORDER BY id LIMIT 1)`, table)
}

// InboxCheck is the readiness check of the inbox's database, for
// fxmodule.ReadyHandler (fxmodule.AsCheck in an fx app): the inbox table
// must answer a query, or the service is not ready, with the database's
// error as the reason — while it does not, the inbox holds every delivery
// in its consumer, waiting for it. s names the tables, as WithSchema does.
func InboxCheck(db *sql.DB, s Schema) fxmodule.Check {
	s, err := s.resolved()
	q := fmt.Sprintf(`SELECT 1 FROM %s LIMIT 1`, s.Inbox)
	return fxmodule.Check{Name: "inbox", Check: func(ctx context.Context) (string, error) {
		if err != nil {
			return "", err
		}
		var one int
		if err := db.QueryRowContext(ctx, q).Scan(&one); err != nil && !errors.Is(err, sql.ErrNoRows) {
			return "", fmt.Errorf("%s: %w", s.Inbox, err)
		}
		return s.Inbox, nil
	}}
}
