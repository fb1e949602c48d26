//go:build integration

package integration

// The outbox's events (issue 39, item 1): a row follows fxmodule.AsPublisher's
// rule, an exchange outbox.AsSender names is checked at start, and
// readiness reports a relay whose rows keep failing. This file's names
// start with events.

import (
	"context"
	"database/sql"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/fx"

	"github.com/acemq/acemq-go/fxmodule"
	"github.com/acemq/acemq-go/internal/testenv"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/outbox"
	"github.com/acemq/acemq-go/topology"
)

// eventsNews and eventsOrders are two senders of an app: one to a topic
// exchange (events), one to a direct exchange (commands).
type (
	eventsNews   interface{ mq.Sender }
	eventsOrders interface{ mq.Sender }
)

// eventsWrite publishes m with s in a transaction of db it commits.
func eventsWrite(t *testing.T, db *sql.DB, s mq.Sender, key string, m mq.Message) {
	t.Helper()
	ctx := testenv.Context(t, 20*time.Second)
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback() //nolint:errcheck // after Commit a no-op
	if err := s.Publish(outbox.WithTx(ctx, tx), key, m); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

// outboxWaitingConsumer declares a goit.* queue q with a message waiting
// in it (through helper), and returns q, the app's topology of it and a
// consumer of it (in the inbox when inbox is set), and the count of its
// handler's calls: a start that fails before any consumer starts leaves
// the count 0 and the message in q.
func outboxWaitingConsumer(t *testing.T, helper *mq.Broker, inbox bool) (string, fx.Option, *atomic.Int32) {
	t.Helper()
	q := testenv.Name(t)
	testenv.Cleanup(t, q)
	topo := topology.New().Queue(q, topology.Classic())
	if err := helper.Declare(testenv.Context(t, 20*time.Second), topo); err != nil {
		t.Fatal(err)
	}
	testenv.Publish(t, helper, q, mq.Message{MessageId: "waits"})
	calls := &atomic.Int32{}
	return q, fx.Options(fxmodule.AsTopology(topo), fxmodule.AsConsumer(func() fxmodule.Consumer {
		return fxmodule.Consumer{Queue: q, Inbox: inbox,
			Handler: mq.HandlerFunc(func(context.Context, *mq.Delivery) error { calls.Add(1); return nil })}
	})), calls
}

// A row follows AsPublisher's rule: to a topic exchange the app's topology
// declares it is an event, so one no queue is bound for is dropped (its
// row deleted, never refused) while one that is bound is delivered; to a
// direct exchange it is a command, mandatory, so an unroutable one is
// refused and tried again. Before, the relay was always mandatory: the
// unbound event was refused (312 NO_ROUTE) and retried for about 8.5 min.
func TestOutboxSenderEventsAndCommands(t *testing.T) {
	db := outboxOpen(t, outboxURL())
	s := outboxTables(t, db)
	news, orders, q := testenv.Name(t, "news"), testenv.Name(t, "orders"), testenv.Name(t)
	testenv.CleanupExchanges(t, news, orders)
	testenv.Cleanup(t, q)
	topo := topology.New().Exchange(news, topology.Topic).Exchange(orders, topology.Direct).
		Queue(q, topology.Classic()).Binding(q, news, "news.bound")
	var ev eventsNews
	var cmd eventsOrders
	b := readyApp(t, db, outbox.Module(outbox.WithSchema(s), outbox.PollInterval(100*time.Millisecond)),
		fxmodule.AsTopology(topo), outbox.AsSender[eventsNews](news), outbox.AsSender[eventsOrders](orders),
		fx.Populate(&ev, &cmd))
	eventsWrite(t, db, ev, "news.nobody", mq.Message{MessageId: "unbound-event"})
	eventsWrite(t, db, ev, "news.bound", mq.Message{MessageId: "bound-event"})
	eventsWrite(t, db, cmd, "nobody", mq.Message{MessageId: "unroutable-command"})

	testenv.Eventually(t, 20*time.Second, func() bool {
		return outboxCount(t, db, s.Outbox, "message_id = 'unroutable-command' AND attempts > 0") == 1
	}, "the unroutable command refused")
	testenv.Eventually(t, 10*time.Second, func() bool {
		return outboxCount(t, db, s.Outbox, "message_id <> 'unroutable-command'") == 0
	}, "both events' rows deleted")
	if ready, _ := fxCount(t, b, q); ready != 1 {
		t.Errorf("%d messages in the bound queue, want the bound event", ready)
	}
	var lastErr string
	if err := db.QueryRow("SELECT last_error FROM " + s.Outbox).Scan(&lastErr); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.ToLower(lastErr), "unroutable") {
		t.Errorf("the command's last_error %q, want it unroutable", lastErr)
	}
}

// An exchange an outbox sender names that neither exists nor is declared
// by the app's topology fails the start, naming it; one that exists
// (declared by someone else) or that the topology declares starts. Before,
// the app started, each row was refused with 404 and /readyz said 200.
func TestOutboxSenderExchangeCheckedAtStart(t *testing.T) {
	db := outboxOpen(t, outboxURL())
	s := outboxTables(t, db)
	helper := testenv.Broker(t, mq.Config{Logger: testenv.Discard()})
	theirs, ours := testenv.Name(t, "theirs"), testenv.Name(t, "ours")
	testenv.CleanupExchanges(t, theirs, ours)
	if err := helper.Declare(testenv.Context(t, 20*time.Second), topology.New().Exchange(theirs, topology.Direct)); err != nil {
		t.Fatal(err)
	}
	misspelled := testenv.Name(t, "nc5.biling")
	q, consumer, calls := outboxWaitingConsumer(t, helper, false)
	app := fx.New(fx.NopLogger, fxmodule.Module, fxConfig(t), fx.Supply(db),
		outbox.Module(outbox.WithSchema(s)), outbox.AsSender[eventsNews](misspelled),
		consumer, fx.Invoke(func(eventsNews) {}))
	ctx := testenv.Context(t, 30*time.Second)
	err := app.Start(ctx)
	_ = app.Stop(ctx)
	if err == nil || !strings.Contains(err.Error(), misspelled) {
		t.Fatalf("start with a sender to the missing exchange %s: %v, want a failure naming it", misspelled, err)
	}
	t.Logf("start failed: %v", err)
	if n := calls.Load(); n != 0 {
		t.Errorf("the handler ran %d times: a consumer started before the check", n)
	}
	if ready, _ := fxCount(t, helper, q); ready != 1 {
		t.Errorf("%d messages ready in the queue after the failed start, want 1 (none taken)", ready)
	}

	ok := fxApp(t, fxConfig(t), fx.Supply(db), outbox.Module(outbox.WithSchema(s)),
		fxmodule.AsTopology(topology.New().Exchange(ours)),
		outbox.AsSender[eventsNews](theirs), outbox.AsSender[eventsOrders](ours),
		fx.Invoke(func(eventsNews, eventsOrders) {}))
	ok.RequireStart()
	ok.RequireStop()
}

// A relay whose rows keep failing makes /readyz answer 503 with the
// relay's last error; once a row goes out again it is ready. Before,
// /readyz stayed 200 while every attempt was refused.
func TestReadyOutboxRowsKeepFailing(t *testing.T) {
	db := outboxOpen(t, outboxURL())
	s := outboxTables(t, db)
	orders, q := testenv.Name(t, "orders"), testenv.Name(t)
	testenv.CleanupExchanges(t, orders)
	testenv.Cleanup(t, q)
	var cmd eventsOrders
	b := readyApp(t, db, outbox.Module(outbox.WithSchema(s), outbox.PollInterval(100*time.Millisecond)),
		fxmodule.AsTopology(topology.New().Exchange(orders, topology.Direct).Queue(q, topology.Classic())),
		outbox.AsSender[eventsOrders](orders), fx.Populate(&cmd))
	ready := fxmodule.ReadyHandler(b)
	if code, body := readyProbe(ready); code != http.StatusOK {
		t.Fatalf("readyz at start: %d %q", code, body)
	}
	eventsWrite(t, db, cmd, "nobody", mq.Message{MessageId: "unroutable-command"})
	var body string
	testenv.Eventually(t, 30*time.Second, func() bool {
		var code int
		code, body = readyProbe(ready)
		return code == http.StatusServiceUnavailable
	}, "readyz to answer 503 while the row keeps failing")
	if !strings.Contains(body, "outbox") || !strings.Contains(strings.ToLower(body), "unroutable") {
		t.Errorf("readyz: %q, want the outbox's line with the relay's last error", body)
	}
	t.Logf("failing: %q", body)
	// The queue is bound: the row goes out at its next attempt.
	if err := b.Declare(testenv.Context(t, 20*time.Second), topology.New().Exchange(orders, topology.Direct).
		Queue(q, topology.Classic()).Binding(q, orders, "nobody")); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() bool { code, _ := readyProbe(ready); return code == http.StatusOK },
		"readyz to answer 200 once the row went out")
	if n := outboxCount(t, db, s.Outbox, ""); n != 0 {
		t.Errorf("%d rows left", n)
	}
}
