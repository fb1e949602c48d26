//go:build field

package main

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acemq/acemq-go/internal/field/check"
	"github.com/acemq/acemq-go/internal/field/history"
	"github.com/acemq/acemq-go/middleware"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/ops"
	"github.com/acemq/acemq-go/retry"
	"github.com/acemq/acemq-go/topology"
)

// TestRungAcrossPartition is seed 101525401's loss made small: a message
// waits in a broker rung (a classic queue, on the node it was declared
// from) when that node is partitioned from the other two, which hold the
// home quorum queue's majority; the rung's TTL expires during the cut.
// RabbitMQ dead-letters from a classic queue at most once, and contract §2
// makes rungs classic queues, so the message may vanish: the test wants it
// handled, or its loss attributed by the checker (check.RungLoss) on the
// evidence the test recorded (the confirmed hop, the rung's node before
// the cut, the cut's span). Any other outcome fails: the message still
// queued 3 min after the heal (stuck), or lost without that evidence.
//
//	go test -tags field -run TestRungAcrossPartition -timeout 10m -v ./internal/cmd/field
func TestRungAcrossPartition(t *testing.T) { rungAcrossPartition(t, false) }

// TestDurableRungAcrossPartition is the same cut with the wait in a
// durable rung (retry.DurableRungs: a quorum queue that dead-letters at
// least once, its leader on f1 as declared): the message must come home,
// handled, with no carve-out (the checker in the durable mode counts a
// rung's loss as lost).
//
//	go test -tags field -run TestDurableRungAcrossPartition -timeout 10m -v ./internal/cmd/field
func TestDurableRungAcrossPartition(t *testing.T) { rungAcrossPartition(t, true) }

func rungAcrossPartition(t *testing.T, durable bool) {
	script, sh := fieldSh(t)
	sh("up")
	t.Cleanup(func() { _ = exec.Command(script, "heal").Run() })
	urls := strings.Split(sh("urls"), ",")
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()

	q := fmt.Sprintf("rungcut.%d", time.Now().UnixNano())
	opts := []retry.Option{retry.InProcessLimit(time.Second)}
	mode := check.RungsClassic
	if durable {
		opts, mode = append(opts, retry.DurableRungs()), check.RungsDurable
	}
	policy := retry.Exponential(2, 5*time.Second, opts...) // one wait: the rung q.retry.5s (.quorum)
	// Declared through f1 only: the rung and the home queue's first leader on f1.
	admin := mq.New(mq.Config{URLs: urls[:1], ConnectionName: "rungcut-admin"})
	if err := admin.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	if err := admin.Declare(ctx, topology.New().Queue(q, topology.Retry(policy))); err != nil {
		t.Fatal(err)
	}
	rung := topology.Rung(q, policy, 5*time.Second).Name
	t.Cleanup(func() {
		c, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, x := range []string{q, rung, topology.DeadLetterQueue(q), topology.ParkedQueue(q)} {
			_, _ = admin.DeleteQueue(c, x)
		}
	})

	// The rung's node, as the orchestrator records it before the faults.
	var places []check.RungPlace
	for _, line := range strings.Split(sh("queue-nodes", q), "\n") {
		if x := strings.Fields(line); len(x) == 2 && x[0] == rung {
			places = append(places, check.RungPlace{Queue: rung, Node: x[1], At: time.Now()})
		}
	}
	t.Logf("rung %s lives on %v", rung, places)

	// The consumer and the publisher on all three nodes, as a service;
	// the history the checker judges, as the field's workers write it.
	var mu sync.Mutex
	var recs []history.Record
	add := func(r history.Record) {
		mu.Lock()
		defer mu.Unlock()
		r.T = time.Now()
		recs = append(recs, r)
	}
	b := mq.New(mq.Config{URLs: urls, ConnectionName: "rungcut", Hooks: []any{hopHook(func(id, queue string) {
		if queue == rung {
			add(history.Record{Kind: history.KindRungHop, ID: id, Queue: queue})
		}
	})}})
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer b.Close(context.Background())
	attempts := map[int]time.Time{}
	c, err := b.Consume(ctx, q, mq.HandlerFunc(func(ctx context.Context, d *mq.Delivery) error {
		mu.Lock()
		attempts[d.Attempt()] = time.Now()
		mu.Unlock()
		if d.Attempt() == 1 {
			add(history.Record{Kind: history.KindAttempt, ID: d.MessageId, Attempt: 1})
			return fmt.Errorf("fail attempt 1: to the rung")
		}
		add(history.Record{Kind: history.KindHandled, ID: d.MessageId, Attempt: d.Attempt()})
		return nil
	}), middleware.Standard(policy))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop(context.Background())
	id := q + ".m"
	if err := b.Publisher("").Publish(ctx, q, mq.Message{Body: []byte("m"), MessageId: id}); err != nil {
		t.Fatal(err)
	}
	add(history.Record{Kind: history.KindPublished, ID: id, Expect: history.EndHandled})
	// Once the hop to the rung is confirmed (attempt 1 acknowledged), cut
	// f1 (the rung's node) from f2 and f3 for longer than the rung's TTL.
	for {
		cs, err := ops.Count(ctx, admin, rung)
		if err == nil && cs[0].Ready == 1 {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the message never reached the rung")
		}
		time.Sleep(50 * time.Millisecond)
	}
	cut := check.FaultSpan{Kind: "partition", Args: []string{"f1", "f2,f3"}, Start: time.Now()}
	sh("partition", "f1", "f2,f3")
	t.Logf("%s: message in %s; f1 cut from f2,f3", time.Now().Format("15:04:05.000"), rung)
	time.Sleep(30 * time.Second)
	sh("heal")
	cut.End = time.Now()
	t.Logf("%s: healed", time.Now().Format("15:04:05.000"))

	deadline := time.Now().Add(3 * time.Minute)
	for time.Now().Before(deadline) {
		mu.Lock()
		_, done := attempts[2]
		mu.Unlock()
		if done {
			break
		}
		time.Sleep(time.Second)
	}
	in := check.Input{
		Rungs:   mode,
		RungTTL: map[string]time.Duration{rung: 5 * time.Second}, RungNodes: places,
		FaultLog: []check.FaultSpan{cut}, Heals: []time.Time{cut.End},
		Nodes: []string{"f1", "f2", "f3"}, Tolerance: detectionWindow(),
	}
	mu.Lock()
	in.Records = append(in.Records, recs...)
	mu.Unlock()
	where := map[string]int{}
	for _, x := range []string{q, rung, topology.DeadLetterQueue(q), topology.ParkedQueue(q)} {
		n := -1
		if cs, err := ops.Count(ctx, admin, x); err == nil && cs[0].Exists {
			n = cs[0].Ready
		}
		where[x] = n
		if n != 0 {
			in.Remaining = append(in.Remaining, check.Place{ID: id, Where: fmt.Sprintf("%s (%d)", x, n)})
		}
	}
	r := check.Check(in)
	var rep strings.Builder
	r.Report(&rep, 10)
	t.Logf("%s\n%s", r.Line(), rep.String())
	if !r.OK() || r.Lost != 0 || r.Published != 1 {
		t.Fatalf("the message that waited in %s across the cut: lost=%d rung_lost=%d stuck=%d (ready counts %v): a loss the rung's cut does not explain, or a message still waiting", rung, r.Lost, r.RungLost, r.Stuck, where)
	}
	mu.Lock()
	_, home := attempts[2]
	mu.Unlock()
	if durable && !home {
		t.Fatalf("the message in the durable rung %s did not come home within 3 min of the heal (ready counts %v)", rung, where)
	}
	t.Logf("the message came home (handled) or its loss is attributed to the rung: rung_lost=%d", r.RungLost)
}

// hopHook is an mq.PublishHook that calls hop for every hop to a broker
// rung the broker confirmed.
type hopHook func(id, queue string)

func (h hopHook) OnPublish(ctx context.Context, _ *mq.PublishInfo) context.Context { return ctx }

func (h hopHook) OnPublishDone(_ context.Context, p *mq.PublishInfo, err error) {
	if err == nil && p.Hop == mq.OutcomeRetry {
		h(p.Message.MessageId, p.RoutingKey)
	}
}
