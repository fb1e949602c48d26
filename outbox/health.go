package outbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/acemq/acemq-go/fxmodule"
)

// RelayCheck is the readiness check of the relay's database, for
// fxmodule.ReadyHandler (Module feeds it to the app; without fx, give it to
// ReadyHandler): the outbox table must answer a query, or the service is
// not ready, with the database's error as the reason. Its detail is the
// age of the oldest pending row (the first in the order rows were written
// that is not set aside), how far behind the relays are. That age is
// reported, never a reason for not ready: every replica shares the table,
// so an old row would take all of them out of service at once, while the
// outbox keeps what they write until the relays catch up; a relay that
// cannot publish because the broker is down is not ready already through
// the broker's own check. Alert on MetricOldestAge instead. s names the
// tables, as WithSchema does.
func RelayCheck(db *sql.DB, s Schema) fxmodule.Check {
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
		return fmt.Sprintf("%s: oldest pending row %v old", s.Outbox, time.Duration(age.Float64*float64(time.Second)).Round(100*time.Millisecond)), nil
	}}
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
