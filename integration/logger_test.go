//go:build integration

package integration

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acemq/acemq-go/internal/testenv"
	"github.com/acemq/acemq-go/middleware"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/outbox"
	"github.com/acemq/acemq-go/retry"
)

// The logger is given in one place, Config.Logger: the Broker logs to it,
// and so do its consumers (their events, with the queue) and the
// middleware they run (Logging's record of each delivery), with nothing
// else to set.
func TestLoggerGivenOnceReachesConsumerAndMiddleware(t *testing.T) {
	t.Parallel()
	lg := testenv.NewLogRecorder(t)
	b := testenv.Broker(t, mq.Config{Logger: lg.Logger()})
	if b.Logger().Handler() != slog.Handler(lg) {
		t.Fatal("Broker.Logger is not Config.Logger")
	}
	p := retry.Fixed(2, 10*time.Millisecond)
	q := testenv.Queue(t, b, p)
	var calls atomic.Int32
	done := make(chan struct{})
	h := mq.HandlerFunc(func(context.Context, *mq.Delivery) error {
		if calls.Add(1) == 1 {
			return errors.New("first attempt fails")
		}
		close(done)
		return nil
	})
	c, err := b.Consume(testenv.Context(t, 30*time.Second), q, h, middleware.Standard(p))
	if err != nil {
		t.Fatal(err)
	}
	defer testenv.Stop(t, c)
	testenv.Publish(t, b, q, mq.Message{MessageId: "logged"})
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatalf("the second attempt did not come; events: %s", lg.Events())
	}
	// Logging writes its record once the fate is carried out, after the
	// handler returned.
	testenv.Eventually(t, 10*time.Second, func() bool { return lg.Count("acemq.message.settled") >= 1 },
		"Logging's record; events: %s", lg.Events())

	retried := lg.All(mq.EventRetry)
	if len(retried) != 1 {
		t.Fatalf("%d %s records, want 1; events: %s", len(retried), mq.EventRetry, lg.Events())
	}
	if r := retried[0]; r.Attrs["queue"] != q || r.Attrs["message_id"] != "logged" {
		t.Errorf("the consumer's %s record %v: want queue %s, message_id logged", mq.EventRetry, r, q)
	}
	settled := lg.All("acemq.message.settled")
	if len(settled) != 1 {
		t.Fatalf("%d acemq.message.settled records, want 1 (one per delivery, the in-process retry within it); events: %s", len(settled), lg.Events())
	}
	if r := settled[0]; r.Attrs["queue"] != q || r.Attrs["message_id"] != "logged" || r.Attrs["outcome"] != string(mq.OutcomeAck) || r.Attrs["attempt"] != "2" {
		t.Errorf("Logging's record %v: want queue %s, message_id logged, outcome ack, attempt 2", r, q)
	}
}

// The logger given by Config.Logger is the only one: Logging's record of a
// delivery carries the consumer's queue attribute once (not a second
// queue= of its own), and a Relay built on the Broker writes its events to
// the Broker's logger, not slog.Default().
func TestLoggerGivenOnceReachesLoggingOnceAndRelay(t *testing.T) {
	t.Parallel()
	var buf auditBuffer
	b := testenv.Broker(t, mq.Config{Logger: slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	p := retry.Fixed(2, 10*time.Millisecond)
	q := testenv.Queue(t, b, p)
	c, err := b.Consume(testenv.Context(t, 30*time.Second), q, mq.HandlerFunc(func(context.Context, *mq.Delivery) error { return nil }),
		middleware.Standard(p))
	if err != nil {
		t.Fatal(err)
	}
	defer testenv.Stop(t, c)
	testenv.Publish(t, b, q, mq.Message{MessageId: "once"})
	testenv.Eventually(t, 20*time.Second, func() bool { return len(buf.lines("acemq.message.settled")) == 1 }, "Logging's record")
	line := buf.lines("acemq.message.settled")[0]
	if n := strings.Count(line, " queue="); n != 1 || !strings.Contains(line, " queue="+q) {
		t.Errorf("Logging's record carries queue= %d times (want once, %s): %s", n, q, line)
	}

	down, err := sql.Open("pgx", "postgres://postgres@127.0.0.1:1/test?sslmode=disable&connect_timeout=2")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = down.Close() })
	// outboxRelay stops the relay when the test ends on any path, and
	// fails the test if its Run returned an error.
	stop := outboxRelay(t, outbox.NewRelay(down, b, outbox.WithSchema(outbox.Schema{Outbox: "logger_outbox"})))
	testenv.Eventually(t, 30*time.Second, func() bool { return len(buf.lines(outbox.EventRelayFailed)) >= 1 },
		"the relay's %s record in the Broker's logger", outbox.EventRelayFailed)
	stop()
}
