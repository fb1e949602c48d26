package outbox

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// Default table names.
const (
	DefaultOutboxTable = "acemq_outbox"
	DefaultInboxTable  = "acemq_inbox"
)

// Schema names the two tables. A name may be schema-qualified
// ("orders.outbox"); it must be a plain lower-case identifier (letters,
// digits, underscores), so it is written into SQL as it is. The zero
// Schema is DefaultOutboxTable and DefaultInboxTable.
type Schema struct {
	// Outbox is the outbox table. Its name is also the NOTIFY channel the
	// relays LISTEN on when it fits PostgreSQL's 63 bytes; a longer
	// (schema-qualified) name notifies on "acemq_outbox_" and the first 32
	// hex digits of the name's SHA-256 instead.
	Outbox string
	// Inbox is the inbox table.
	Inbox string
}

var identRe = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}(\.[a-z_][a-z0-9_]{0,62})?$`)

// resolved returns s with defaults filled in, or an error naming a bad name.
func (s Schema) resolved() (Schema, error) {
	if s.Outbox == "" {
		s.Outbox = DefaultOutboxTable
	}
	if s.Inbox == "" {
		s.Inbox = DefaultInboxTable
	}
	for _, n := range []string{s.Outbox, s.Inbox} {
		if !identRe.MatchString(n) {
			return s, fmt.Errorf("%w: table name %q (want a lower-case identifier, optionally schema-qualified)", ErrSchema, n)
		}
	}
	return s, nil
}

// maxChannel is the longest NOTIFY channel PostgreSQL takes (NAMEDATALEN-1).
const maxChannel = 63

// channel is the NOTIFY channel of the outbox table: its name when that
// fits, else a name derived from it that always does.
func (s Schema) channel() string {
	if len(s.Outbox) <= maxChannel {
		return s.Outbox
	}
	sum := sha256.Sum256([]byte(s.Outbox))
	return "acemq_outbox_" + hex.EncodeToString(sum[:16])
}

// base is a table name without its schema, for naming its indexes.
func base(table string) string {
	if i := strings.LastIndexByte(table, '.'); i >= 0 {
		return table[i+1:]
	}
	return table
}

// SQL returns the statements that create both tables and their indexes,
// idempotently (CREATE … IF NOT EXISTS), for a service that runs its
// migrations with a tool of its own. The columns:
//
// Outbox: id (bigserial: the order rows are written in), created_at,
// exchange, routing_key, ordering_key (empty for none), message_id, body,
// properties (jsonb: every AMQP property and header, each header value with
// its type, and bytes that are not UTF-8 text kept in base64: see
// docs/outbox.md), trace (jsonb: the writer's trace context), attempts,
// retry_at (when a refused row may be tried again), last_error, and
// set_aside_at (set: the relay gave up on the row; clear it to try again).
//
// Inbox: queue, key (primary key together), received_at. A key is
// recorded as it is when it is UTF-8 without NUL bytes, at most 2048 bytes,
// not beginning with the byte 0x01 and "sha256:"; any other as 0x01,
// "sha256:" and the hex SHA-256 of its bytes.
func (s Schema) SQL() (string, error) {
	s, err := s.resolved()
	if err != nil {
		return "", err
	}
	o, i := s.Outbox, s.Inbox
	ob, ib := base(o), base(i)
	return fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %[1]s (
	id           bigserial   PRIMARY KEY,
	created_at   timestamptz NOT NULL DEFAULT now(),
	exchange     text        NOT NULL,
	routing_key  text        NOT NULL,
	ordering_key text        NOT NULL DEFAULT '',
	message_id   text        NOT NULL DEFAULT '',
	body         bytea       NOT NULL,
	properties   jsonb       NOT NULL,
	trace        jsonb,
	attempts     integer     NOT NULL DEFAULT 0,
	retry_at     timestamptz,
	last_error   text,
	set_aside_at timestamptz
);
CREATE INDEX IF NOT EXISTS %[2]s_pending ON %[1]s (id) WHERE set_aside_at IS NULL;
CREATE INDEX IF NOT EXISTS %[2]s_ordered ON %[1]s (ordering_key, id) WHERE ordering_key <> '' AND set_aside_at IS NULL;
CREATE TABLE IF NOT EXISTS %[3]s (
	queue       text        NOT NULL,
	key         text        NOT NULL,
	received_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (queue, key)
);
CREATE INDEX IF NOT EXISTS %[4]s_received ON %[3]s (received_at);
`, o, ob, i, ib), nil
}

// createLock is the key of the transaction-level advisory lock Create
// holds while it creates: PostgreSQL's CREATE … IF NOT EXISTS is not safe
// against itself (two sessions can both find a table missing; the second
// fails on pg_type's unique index), so every Create of every replica takes
// its turn. The key is "acemq.ob" in ASCII, read as a number.
const createLock int64 = 0x61_63_65_6d_71_2e_6f_62

// Create creates both tables and their indexes in db when they do not
// exist yet; it never alters or drops anything. Run it at start-up (it is
// idempotent, and safe from any number of replicas at once: each call
// holds an advisory lock while it creates, so they run one after the
// other) or take SQL's statements into your own migrations.
func (s Schema) Create(ctx context.Context, db *sql.DB) error {
	q, err := s.SQL()
	if err != nil {
		return err
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("outbox: create tables: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // after Commit a no-op
	if _, err := tx.ExecContext(ctx, "SELECT pg_advisory_xact_lock($1)", createLock); err != nil {
		return fmt.Errorf("outbox: create tables: lock: %w", err)
	}
	if _, err := tx.ExecContext(ctx, q); err != nil {
		return fmt.Errorf("outbox: create tables: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("outbox: create tables: %w", err)
	}
	return nil
}

// The columns the package reads and writes, per table: a table without
// one of them is of another shape.
var (
	outboxColumns = []string{"id", "created_at", "exchange", "routing_key", "ordering_key", "message_id", "body",
		"properties", "trace", "attempts", "retry_at", "last_error", "set_aside_at"}
	inboxColumns = []string{"queue", "key", "received_at"}
)

// Check makes sure both tables exist in db with the columns this package
// uses (see SQL), one query each, and fails with an error matching
// ErrSchema that names each table missing, or of another shape, with its
// schema (an unqualified name is named with the schema it resolves to, the
// first of the search path). It creates nothing: run it at start-up in a
// service without fx (outbox.Module runs it at start; Relay.Run checks its
// table itself) so a missing table stops the start, instead of being
// taken for an outage the inbox waits out for ever. A database that cannot
// be reached fails it with the driver's error.
func (s Schema) Check(ctx context.Context, db *sql.DB) error {
	return s.check(ctx, db, true, true)
}

// check checks the outbox table and/or the inbox table.
func (s Schema) check(ctx context.Context, db *sql.DB, outbox, inbox bool) error {
	s, err := s.resolved()
	if err != nil {
		return err
	}
	type table struct {
		kind, name string
		want       []string
	}
	var tables []table
	if outbox {
		tables = append(tables, table{"outbox", s.Outbox, outboxColumns})
	}
	if inbox {
		tables = append(tables, table{"inbox", s.Inbox, inboxColumns})
	}
	var errs []error
	for _, t := range tables {
		// to_regclass is NULL for a table (or schema) that does not exist;
		// it resolves an unqualified name through the search path.
		var ns, cols sql.NullString
		err := db.QueryRowContext(ctx, `SELECT COALESCE(n.nspname, current_schema()),
(SELECT string_agg(a.attname::text, ',') FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped)
FROM (SELECT to_regclass($1) AS oid) r LEFT JOIN pg_class c ON c.oid = r.oid LEFT JOIN pg_namespace n ON n.oid = c.relnamespace`,
			t.name).Scan(&ns, &cols)
		if err != nil {
			return fmt.Errorf("outbox: check the %s table %s: %w", t.kind, t.name, err)
		}
		name := t.name
		if !strings.Contains(name, ".") && ns.Valid {
			name = ns.String + "." + name
		}
		if !cols.Valid {
			errs = append(errs, fmt.Errorf("%w: the %s table %s does not exist (create it with Schema.Create, or take Schema.SQL's statements into your migrations)", ErrSchema, t.kind, name))
			continue
		}
		have := strings.Split(cols.String, ",")
		var missing []string
		for _, c := range t.want {
			if !slices.Contains(have, c) {
				missing = append(missing, c)
			}
		}
		if len(missing) > 0 {
			errs = append(errs, fmt.Errorf("%w: the %s table %s is of another shape: it has no column %s (see Schema.SQL for the columns)", ErrSchema, t.kind, name, strings.Join(missing, ", ")))
		}
	}
	return errors.Join(errs...)
}
