//go:build integration

package integration

// Issue 11, items 5 and 6, and issue 12 item 5: a return is credited to
// exactly the publish that caused it; a refusal hurts only its own
// publish; every publisher is mandatory unless it says otherwise.

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/internal/testenv"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/topology"
)

// hardHeadersRig declares a headers exchange whose one binding takes
// messages with route=yes, and the queue behind it.
func hardHeadersRig(t *testing.T, b *mq.Broker) (ex, q string) {
	t.Helper()
	ctx := testenv.Context(t, 10*time.Second)
	q = coreQueue(t, b, nil)
	ex = testenv.Name(t, "headers")
	testenv.CleanupExchanges(t, ex)
	if err := b.Declare(ctx, topology.New().Exchange(ex, topology.Headers)); err != nil {
		t.Fatal(err)
	}
	ch, err := b.Channel(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	if err := ch.QueueBind(q, "", ex, false, amqp.Table{"x-match": "all", "route": "yes"}); err != nil {
		t.Fatal(err)
	}
	return ex, q
}

// Pairs of publishes with the same routing key and message id, only one
// of which routes: every unroutable one is ErrUnroutable, every routable
// one nil, 200 pairs at once through Publish and 200 in one PublishBatch.
func TestHardeningExactReturns(t *testing.T) {
	b, _, _ := hardBroker(t, mq.Config{})
	ctx := testenv.Context(t, 60*time.Second)
	ex, q := hardHeadersRig(t, b)
	pub := b.Publisher(ex, mq.Mandatory()) // said explicitly: this test is about matching returns
	defer pub.Close()
	routes := func(yes bool) amqp.Table {
		if yes {
			return amqp.Table{"route": "yes"}
		}
		return amqp.Table{"route": "no"}
	}
	const pairs = 200
	var (
		wg                    sync.WaitGroup
		mu                    sync.Mutex
		silent, falseReturned int
	)
	for i := range pairs {
		for _, yes := range []bool{true, false} {
			wg.Go(func() {
				err := pub.Publish(ctx, "k", mq.Message{MessageId: fmt.Sprintf("pair-%d", i), Headers: routes(yes)})
				mu.Lock()
				defer mu.Unlock()
				switch {
				case yes && err != nil:
					falseReturned++
					t.Logf("routable publish %d: %v", i, err)
				case !yes && !errors.Is(err, mq.ErrUnroutable):
					silent++
					t.Logf("unroutable publish %d: %v", i, err)
				}
			})
		}
	}
	wg.Wait()
	if silent > 0 || falseReturned > 0 {
		t.Errorf("Publish, %d pairs at once: %d unroutable publishes not reported, %d routable ones reported failed", pairs, silent, falseReturned)
	}

	batch := make([]mq.Message, 0, 2*pairs)
	for i := range pairs {
		id := fmt.Sprintf("batch-%d", i)
		batch = append(batch, mq.Message{MessageId: id, Headers: routes(true)}, mq.Message{MessageId: id, Headers: routes(false)})
	}
	err := pub.PublishBatch(ctx, "k", batch)
	var be *mq.BatchError
	if !errors.As(err, &be) {
		t.Fatalf("batch: %v; want a BatchError for the unroutable half", err)
	}
	silent, falseReturned = 0, 0
	for i, e := range be.Errs {
		switch {
		case i%2 == 0 && e != nil:
			falseReturned++
		case i%2 == 1 && !errors.Is(e, mq.ErrUnroutable):
			silent++
		}
	}
	if silent > 0 || falseReturned > 0 {
		t.Errorf("PublishBatch of %d pairs: %d unroutable publishes not reported, %d routable ones reported failed", pairs, silent, falseReturned)
	}
	if n := testenv.Count(t, b, q); n != 2*pairs {
		t.Errorf("the queue holds %d; want %d", n, 2*pairs)
	}
}

// Issue 12 item 5: a Publisher on a named exchange is mandatory by
// default, so nil means a queue has the message; AllowUnroutable is the
// explicit fire-and-forget.
func TestHardeningMandatoryByDefault(t *testing.T) {
	b, _, _ := hardBroker(t, mq.Config{})
	ctx := testenv.Context(t, 20*time.Second)
	ex, q := hardHeadersRig(t, b)
	if err := b.Publisher(ex).Publish(ctx, "k", mq.Message{}); !errors.Is(err, mq.ErrUnroutable) {
		t.Errorf("a publish no queue is bound for, default options: %v; want ErrUnroutable", err)
	}
	if err := b.Publisher(ex, mq.AllowUnroutable()).Publish(ctx, "k", mq.Message{}); err != nil {
		t.Errorf("the same with AllowUnroutable: %v; want nil", err)
	}
	if err := b.Publisher(ex).Publish(ctx, "k", mq.Message{Headers: amqp.Table{"route": "yes"}}); err != nil {
		t.Errorf("a routable publish: %v", err)
	}
	if n := testenv.Count(t, b, q); n != 1 {
		t.Errorf("the queue holds %d; want 1", n)
	}
}

// One publish the broker refuses by closing the channel (a user id that
// is not the connection's user: 406) among 300 in flight: only it fails,
// with the refusal; every other one is confirmed (sent again alone when it
// was in flight beside the refused one) and in the queue.
func TestHardeningRefusalHurtsOnlyItsOwn(t *testing.T) {
	b, _, lg := hardBroker(t, mq.Config{})
	ctx := testenv.Context(t, 60*time.Second)
	q := coreQueue(t, b, nil)
	pub := b.Publisher("")
	defer pub.Close()
	const total, bad = 300, 150
	errs := make([]error, total)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range total {
		wg.Go(func() {
			<-start
			m := mq.Message{MessageId: fmt.Sprintf("m-%03d", i), Body: []byte("x")}
			if i == bad {
				m.UserId = "somebody-else"
			}
			errs[i] = pub.Publish(ctx, q, m)
		})
	}
	close(start)
	wg.Wait()
	innocent := 0
	for i, err := range errs {
		if i == bad {
			if !errors.Is(err, mq.ErrPreconditionFailed) {
				t.Errorf("the refused publish: %v; want ErrPreconditionFailed", err)
			}
			continue
		}
		if err != nil {
			innocent++
			if innocent <= 3 {
				t.Logf("innocent publish %d failed: %v", i, err)
			}
		}
	}
	if innocent > 0 {
		t.Errorf("%d innocent publishes failed beside the one refused; want 0", innocent)
	}
	got := coreDrain(t, b, q)
	missing := 0
	for i := range total {
		if i != bad && got[fmt.Sprintf("m-%03d", i)] == 0 {
			missing++
		}
	}
	if missing > 0 {
		t.Errorf("%d confirmed publishes are not in the queue", missing)
	}
	dups := 0
	for _, n := range got {
		dups += n - 1
	}
	if n := lg.Count(mq.EventConnectionLost); n != 0 {
		t.Errorf("%d connections lost", n)
	}
	t.Logf("1 refused among %d: %d innocent failures, %d in the queue, %d duplicates (sent again alone, at least once)", total, innocent, len(got), dups)

	// The same inside one batch.
	batch := make([]mq.Message, 200)
	for i := range batch {
		batch[i] = mq.Message{MessageId: fmt.Sprintf("b-%03d", i)}
	}
	batch[100].UserId = "somebody-else"
	err := pub.PublishBatch(ctx, q, batch)
	var be *mq.BatchError
	if !errors.As(err, &be) {
		t.Fatalf("batch: %v; want a BatchError", err)
	}
	for i, e := range be.Errs {
		if (i == 100) != (e != nil) {
			t.Errorf("batch message %d: %v", i, e)
		}
	}
	if !errors.Is(be.Errs[100], mq.ErrPreconditionFailed) {
		t.Errorf("the refused batch message: %v; want ErrPreconditionFailed", be.Errs[100])
	}
}
