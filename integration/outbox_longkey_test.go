//go:build integration

package integration

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/acemq/acemq-go/internal/testenv"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/outbox"
)

// An ordering key of 3 KB (past what the ordering index's btree takes,
// about 2.7 KB) is stored as the inbox stores long keys, by its hash: the
// caller's transaction commits with its business row, and rows of two such
// keys that differ only in their last byte go out each in its own order.
// Before, Publish failed inside the caller's transaction with SQLSTATE
// 54000 ("index row size … exceeds btree version 4 maximum"), aborting the
// business row with it.
func TestOutboxLongOrderingKey(t *testing.T) {
	db, s, b, q, ctx := outboxRig(t, testenv.Discard())
	business := s.Outbox + "_orders"
	if _, err := db.ExecContext(ctx, "CREATE TABLE "+business+" (id text PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = db.ExecContext(context.Background(), "DROP TABLE IF EXISTS "+business) })
	// Random, so PostgreSQL cannot compress it under the limit.
	var raw [1500]byte
	_, _ = rand.Read(raw[:])
	long := hex.EncodeToString(raw[:])
	ob := outbox.New(outbox.WithSchema(s), outbox.OrderBy(func(_, _ string, m *mq.Message) string { return long + m.Type }))
	const each = 5
	for i := range each {
		for _, key := range []string{"a", "b"} {
			m := mq.Message{MessageId: fmt.Sprintf("%s-%d", key, i), Type: key}
			err := outboxWrite(ctx, db, ob, "", q, m, true, func(tx *sql.Tx) error {
				_, err := tx.ExecContext(ctx, "INSERT INTO "+business+" VALUES ($1)", m.MessageId)
				return err
			})
			if err != nil {
				t.Fatalf("write %s with a 3 KB ordering key: %v", m.MessageId, err)
			}
		}
	}
	if n := outboxCount(t, db, business, ""); n != 2*each {
		t.Fatalf("%d business rows committed, want %d", n, 2*each)
	}
	var mu sync.Mutex
	next := map[string]int{}
	var got, disorder []string
	c, err := b.Consume(ctx, q, mq.HandlerFunc(func(_ context.Context, d *mq.Delivery) error {
		var i int
		fmt.Sscanf(d.MessageId[2:], "%d", &i)
		mu.Lock()
		defer mu.Unlock()
		if i != next[d.Type] {
			disorder = append(disorder, d.MessageId)
		}
		next[d.Type] = i + 1
		got = append(got, d.MessageId)
		return nil
	}), mq.WithConcurrency(1), mq.WithPrefetch(1))
	if err != nil {
		t.Fatal(err)
	}
	outboxRelay(t, outbox.NewRelay(db, b, outbox.WithSchema(s), outbox.BatchSize(3)))
	testenv.Eventually(t, 20*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(got) >= 2*each },
		"all %d rows delivered", 2*each)
	testenv.Stop(t, c)
	mu.Lock()
	defer mu.Unlock()
	if len(disorder) > 0 || len(got) != 2*each {
		t.Errorf("delivered %v: out of order %v", got, disorder)
	}
}
