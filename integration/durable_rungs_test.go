//go:build integration

package integration

// Issue 40: durable rungs (retry.DurableRungs: quorum queues that dead-letter
// at least once). The hop through one, a rung that refuses it, a queue
// moving from classic rungs to durable ones with messages waiting, and a
// duplicate the broker's dead-letter worker can make.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/internal/testenv"
	"github.com/acemq/acemq-go/middleware"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/retry"
	"github.com/acemq/acemq-go/topology"
)

// rungCall is one call of a handler: which message, its attempt, when, and
// the queue its latest x-death names (the rung it came home from).
type rungCall struct {
	id      string
	attempt int
	at      time.Time
	from    string
}

type rungCalls struct {
	mu    sync.Mutex
	calls []rungCall
}

func (r *rungCalls) add(d *mq.Delivery) rungCall {
	c := rungCall{id: d.MessageId, attempt: d.Attempt(), at: time.Now()}
	if deaths, ok := d.Headers["x-death"].([]any); ok && len(deaths) > 0 {
		if t, ok := deaths[0].(amqp.Table); ok {
			c.from, _ = t["queue"].(string)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, c)
	return c
}

// of is the calls for message id, in order.
func (r *rungCalls) of(id string) []rungCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []rungCall
	for _, c := range r.calls {
		if c.id == id {
			out = append(out, c)
		}
	}
	return out
}

func (r *rungCalls) n() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.calls)
}

func attemptsOf(cs []rungCall) []int {
	out := make([]int, len(cs))
	for i, c := range cs {
		out[i] = c.attempt
	}
	return out
}

// rungConsumer consumes q with the standard stack of p (declaring its
// topology, rungs included) and h.
func rungConsumer(t *testing.T, b *mq.Broker, q string, p retry.Policy, h mq.HandlerFunc) *mq.Consumer {
	t.Helper()
	c, err := b.Consume(testenv.Context(t, 30*time.Second), q, h, middleware.Standard(p), mq.WithRequeuePause(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// sameQueue declares queue as it is; an error says its arguments differ
// (a PRECONDITION_FAILED: the kind of rung, its TTL, its route home).
func sameQueue(t *testing.T, b *mq.Broker, queue topology.Queue) error {
	t.Helper()
	ch, err := b.Channel(testenv.Context(t, 15*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	_, err = ch.QueueDeclare(queue.Name, queue.Durable, false, false, false, queue.Args)
	return err
}

// The hop: a policy's broker waits with retry.DurableRungs go through the
// quorum rung DurableRungQueue and come home, attempts 1, 2, 3 with no gap
// and each at least the wait after the one before.
func TestDurableRungHop(t *testing.T) {
	b, _ := consBroker(t)
	p := retry.Fixed(3, 2*time.Second, retry.InProcessLimit(0), retry.DurableRungs())
	q := testenv.Queue(t, b, p) // quorum
	var calls rungCalls
	c := rungConsumer(t, b, q, p, func(_ context.Context, d *mq.Delivery) error {
		calls.add(d)
		return fmt.Errorf("fails on attempt %d", d.Attempt())
	})
	defer testenv.Stop(t, c)
	testenv.Publish(t, b, q, mq.Message{Body: []byte("x"), MessageId: "durable-hop"})
	testenv.WaitCount(t, b, topology.DeadLetterQueue(q), 1, 60*time.Second)
	got := calls.of("durable-hop")
	if a := attemptsOf(got); !slices.Equal(a, []int{1, 2, 3}) {
		t.Fatalf("attempts %v, want 1 2 3", a)
	}
	rung := topology.DurableRungQueue(q, 2*time.Second)
	for i, c := range got[1:] {
		if c.from != rung {
			t.Errorf("attempt %d came home from %q, want the durable rung %s", c.attempt, c.from, rung)
		}
		if w := c.at.Sub(got[i].at); w < 1500*time.Millisecond {
			t.Errorf("attempt %d ran %v after attempt %d, want at least the 2 s wait", c.attempt, w.Round(time.Millisecond), got[i].attempt)
		}
	}
	if err := sameQueue(t, b, topology.Queue{Name: rung, Durable: true, Args: topology.DurableRungArguments(q, 2*time.Second)}); err != nil {
		t.Errorf("%s is not declared with the durable rung's argument table: %v", rung, err)
	}
	dl := testenv.GetAll(t, b, topology.DeadLetterQueue(q))
	if len(dl) != 1 || mq.AttemptOf(dl[0].Headers) != 4 {
		t.Fatalf(".dlq: %v, want one message carrying attempt 4", headersOf(dl))
	}
	for _, name := range []string{q, rung} {
		if n := testenv.Count(t, b, name); n != 0 {
			t.Errorf("%s still holds %d messages", name, n)
		}
	}
}

// A durable rung that refuses the hop (an operator's policy: max-length 0,
// reject-publish) keeps the message home: no attempt is skipped and no wait
// spent. The handler is not called again while the rung refuses, and once
// it accepts, the message waits the whole wait before attempt 2.
func TestDurableRungRefusedByPolicy(t *testing.T) {
	const wait = 10 * time.Second // the filler below must outlast the refusal
	b, lg := consBroker(t)
	p := retry.Fixed(2, wait, retry.InProcessLimit(0), retry.DurableRungs())
	q := testenv.Queue(t, b, p, topology.Classic(), topology.DeadLetter())
	if err := b.Declare(testenv.Context(t, 15*time.Second), topology.New().Queue(q, topology.Classic(), topology.DeadLetter(), topology.Retry(p))); err != nil {
		t.Fatal(err)
	}
	rung := topology.DurableRungQueue(q, wait)
	policy := testenv.Name(t, "policy")
	if _, err := testenv.Rabbitmqctl(testenv.Context(t, time.Minute), "", "set_policy", "--apply-to", "queues", "--priority", "100",
		policy, "^"+rung+"$", `{"max-length":0,"overflow":"reject-publish"}`); err != nil {
		t.Fatal(err)
	}
	cleared := false
	clear := func() {
		if !cleared {
			cleared = true
			if _, err := testenv.Rabbitmqctl(testenv.Context(t, time.Minute), "", "clear_policy", policy); err != nil {
				t.Error(err)
			}
		}
	}
	t.Cleanup(clear)
	// A quorum queue takes one message past its limit before it refuses
	// (a message a consumer holds does not count): the filler is that one.
	ch, err := b.Channel(testenv.Context(t, 15*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	fill := func(id string) bool {
		t.Helper()
		c, err := ch.PublishWithDeferredConfirm("", rung, false, false, amqp.Publishing{Body: []byte("filler"), MessageId: id})
		if err != nil {
			t.Fatal(err)
		}
		ok, err := c.WaitContext(testenv.Context(t, 10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if !testenv.Poll(10*time.Second, func() bool { return !fill("probe") }) {
		t.Fatalf("%s took every message within 10 s: the policy did not apply", rung)
	}
	filled := time.Now()

	var calls rungCalls
	c := rungConsumer(t, b, q, p, func(_ context.Context, d *mq.Delivery) error {
		calls.add(d)
		return fmt.Errorf("fails on attempt %d", d.Attempt())
	})
	defer testenv.Stop(t, c)
	testenv.Publish(t, b, q, mq.Message{Body: []byte("x"), MessageId: "durable-refused"})
	if !testenv.Poll(wait/2, func() bool { return lg.Count(mq.EventRequeued) >= 3 || calls.n() > 1 }) {
		t.Fatalf("within %v: %d returns, %d calls (events: %s)", wait/2, lg.Count(mq.EventRequeued), calls.n(), lg.Events())
	}
	if a := attemptsOf(calls.of("durable-refused")); len(a) != 1 {
		t.Fatalf("while %s refused the hop the handler ran attempts %v, want only 1", rung, a)
	}
	// The rung accepts again: the filler goes (acknowledged, not
	// dead-lettered), then the policy. The rung may take the hop as soon
	// as the filler is held by the Get (a held message does not count
	// towards the limit), before the policy is cleared: the wait is
	// measured from before the Get.
	accepted := time.Now()
	m, ok, err := ch.Get(rung, false)
	if err != nil || !ok || m.MessageId != "probe" || time.Since(filled) > wait {
		t.Fatalf("the filler: %q, %v, %v after %v", m.MessageId, ok, err, time.Since(filled))
	}
	if err := m.Ack(false); err != nil {
		t.Fatal(err)
	}
	clear()
	testenv.WaitCount(t, b, topology.DeadLetterQueue(q), 1, 3*wait)
	got := calls.of("durable-refused")
	if a := attemptsOf(got); !slices.Equal(a, []int{1, 2}) {
		t.Fatalf("attempts %v, want 1 2", a)
	}
	if w := got[1].at.Sub(accepted); w < wait-time.Second {
		t.Errorf("attempt 2 ran %v after the rung accepted, want at least its %v wait", w.Round(time.Millisecond), wait)
	}
	if got[1].from != rung {
		t.Errorf("attempt 2 came home from %q, want %s", got[1].from, rung)
	}
	for _, name := range []string{q, rung} {
		if n := testenv.Count(t, b, name); n != 0 {
			t.Errorf("%s still holds %d messages", name, n)
		}
	}
}

// A queue moves from classic rungs to durable ones while messages wait in
// the classic rung: the new topology declares the durable rung beside the
// classic one (no PRECONDITION_FAILED), the waiting messages still come
// home, their next wait is in the durable rung, and the classic rung is
// left where it was, empty: the library never deletes a rung.
func TestDurableRungMoveFromClassic(t *testing.T) {
	b, _ := consBroker(t)
	classic := retry.Fixed(3, 3*time.Second, retry.InProcessLimit(0))
	durable := retry.Fixed(3, 3*time.Second, retry.InProcessLimit(0), retry.DurableRungs())
	q := testenv.Queue(t, b, classic)
	testenv.CleanupDerived(t, q, durable)
	old, rung := topology.RungQueue(q, 3*time.Second), topology.DurableRungQueue(q, 3*time.Second)
	if old == rung {
		t.Fatalf("a durable rung is named as the classic one: %s", rung)
	}
	const n = 5
	var calls rungCalls
	fails := func(_ context.Context, d *mq.Delivery) error {
		if calls.add(d).attempt < 3 {
			return fmt.Errorf("fails on attempt %d", d.Attempt())
		}
		return nil
	}
	c := rungConsumer(t, b, q, classic, fails)
	testenv.Publish(t, b, q, consMessages("move", n)...)
	testenv.WaitCount(t, b, old, n, 20*time.Second)
	testenv.Stop(t, c)

	c = rungConsumer(t, b, q, durable, fails)
	defer testenv.Stop(t, c)
	if !testenv.Poll(60*time.Second, func() bool { return calls.n() == 3*n }) {
		t.Fatalf("within 60 s of the switch: %d calls, want %d", calls.n(), 3*n)
	}
	for i := range n {
		id := fmt.Sprintf("move-%d", i)
		got := calls.of(id)
		if a := attemptsOf(got); !slices.Equal(a, []int{1, 2, 3}) {
			t.Errorf("%s: attempts %v, want 1 2 3", id, a)
			continue
		}
		if got[1].from != old || got[2].from != rung {
			t.Errorf("%s: attempt 2 came home from %q, attempt 3 from %q; want %s, then %s", id, got[1].from, got[2].from, old, rung)
		}
	}
	for _, queue := range []topology.Queue{
		{Name: old, Durable: true, Args: topology.RungArguments(q, 3*time.Second)},
		{Name: rung, Durable: true, Args: topology.DurableRungArguments(q, 3*time.Second)},
	} {
		if err := sameQueue(t, b, queue); err != nil {
			t.Errorf("%s is gone or changed after the switch: %v", queue.Name, err)
			continue
		}
		if k := testenv.Count(t, b, queue.Name); k != 0 {
			t.Errorf("%s still holds %d messages", queue.Name, k)
		}
	}
	for _, name := range []string{q, topology.DeadLetterQueue(q)} {
		if k := testenv.Count(t, b, name); k != 0 {
			t.Errorf("%s holds %d messages, want none", name, k)
		}
	}
}

// The broker's dead-letter worker re-publishes a dead letter it saw no
// confirm for, so one wait can end in two copies of the same hop at home.
// The second is one more delivery of the same attempt, not a new attempt:
// the handler sees attempt 2 twice, and never an attempt 3.
func TestDurableRungDuplicateIsTheSameAttempt(t *testing.T) {
	b, _ := consBroker(t)
	p := retry.Fixed(3, 3*time.Second, retry.InProcessLimit(0), retry.DurableRungs())
	q := testenv.Queue(t, b, p)
	rung := topology.DurableRungQueue(q, 3*time.Second)
	var calls rungCalls
	c := rungConsumer(t, b, q, p, func(_ context.Context, d *mq.Delivery) error {
		if calls.add(d).attempt == 1 {
			return errors.New("fails on attempt 1")
		}
		return nil
	})
	defer testenv.Stop(t, c)
	testenv.Publish(t, b, q, mq.Message{Body: []byte("x"), MessageId: "durable-dup"})
	testenv.WaitCount(t, b, rung, 1, 20*time.Second)
	// Copy the hop as it waits, headers and all, into the rung beside it:
	// two copies of one hop, as the worker's re-publish makes.
	ch, err := b.Channel(testenv.Context(t, 15*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	m, ok, err := ch.Get(rung, false)
	if err != nil || !ok {
		t.Fatalf("get from %s: %v, %v", rung, ok, err)
	}
	conf, err := ch.PublishWithDeferredConfirm("", rung, false, false, amqp.Publishing{
		Headers: m.Headers, MessageId: m.MessageId, Body: m.Body, ContentType: m.ContentType, DeliveryMode: amqp.Persistent,
	})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := conf.WaitContext(testenv.Context(t, 10*time.Second)); !ok || err != nil {
		t.Fatalf("the copy into %s was not confirmed: %v, %v", rung, ok, err)
	}
	if err := m.Nack(false, true); err != nil {
		t.Fatal(err)
	}
	if !testenv.Poll(30*time.Second, func() bool { return len(calls.of("durable-dup")) >= 3 }) {
		t.Fatalf("calls %v within 30 s, want attempt 1 and two deliveries of attempt 2", attemptsOf(calls.of("durable-dup")))
	}
	time.Sleep(4 * time.Second) // a further hop would be back by now
	got := calls.of("durable-dup")
	if a := attemptsOf(got); !slices.Equal(a, []int{1, 2, 2}) {
		t.Fatalf("attempts %v, want 1 2 2: the copy is the same attempt", a)
	}
	for _, c := range got[1:] {
		if c.from != rung {
			t.Errorf("attempt 2 came home from %q, want %s", c.from, rung)
		}
	}
	for _, name := range []string{q, rung, topology.DeadLetterQueue(q)} {
		if k := testenv.Count(t, b, name); k != 0 {
			t.Errorf("%s holds %d messages, want none", name, k)
		}
	}
}

// acemq rungs shows a queue's rungs of both kinds with what waits in each,
// and says the classic set can be retired only once it is empty.
func TestCLIRungsShowsBothKinds(t *testing.T) {
	b := testenv.Broker(t, mq.Config{})
	const wait = time.Minute
	classic := retry.Fixed(2, wait, retry.InProcessLimit(0))
	durable := retry.Fixed(2, wait, retry.InProcessLimit(0), retry.DurableRungs())
	q := testenv.Queue(t, b, classic)
	testenv.CleanupDerived(t, q, durable)
	for _, p := range []retry.Policy{classic, durable} {
		if err := b.Declare(testenv.Context(t, 15*time.Second), topology.New().Queue(q, topology.Retry(p))); err != nil {
			t.Fatal(err)
		}
	}
	old, rung := topology.RungQueue(q, wait), topology.DurableRungQueue(q, wait)
	testenv.Publish(t, b, old, consMessages("waiting", 2)...)
	testenv.Publish(t, b, rung, consMessages("durable", 1)...)

	code, out, errs := cliRun(t, "", "rungs", q, "--waits", "1m,5m")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || errs != "" || len(lines) != 3 ||
		!slices.Equal(strings.Fields(lines[1]), []string{old, "classic", "1m", "2", "0"}) ||
		!slices.Equal(strings.Fields(lines[2]), []string{rung, "durable", "1m", "1", "0"}) {
		t.Fatalf("rungs with 2 waiting in the classic rung: exit %d\n%s\nstderr %q", code, out, errs)
	}
	if strings.Contains(out, "retire") {
		t.Errorf("rungs says the classic set can go while it holds 2:\n%s", out)
	}

	ch, err := b.Channel(testenv.Context(t, 15*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	if _, err := ch.QueuePurge(old, false); err != nil {
		t.Fatal(err)
	}
	code, out, _ = cliRun(t, "", "rungs", q, "--waits", "1m")
	if code != 0 || !strings.HasSuffix(out, "classic rungs empty: safe to retire\n") {
		t.Fatalf("rungs with the classic rung empty: exit %d\n%s", code, out)
	}
	code, v, _ := cliJSON(t, "", "rungs", q, "--waits", "1m")
	rs, _ := v["rungs"].([]any)
	if code != 0 || len(rs) != 2 || v["classic_retirable"] != true {
		t.Fatalf("rungs --json: exit %d, %v", code, v)
	}
	if code, _, errs := cliRun(t, "", "rungs", q, "--waits", "500ms"); code != 2 || !strings.Contains(errs, "--waits") {
		t.Errorf("rungs --waits 500ms: exit %d, stderr %q; want a usage error", code, errs)
	}
}

// The peer check: a Python service (pika, testdata/pika_rung_peer.py)
// hops the queue's messages through classic rungs while the Go service
// hops them through durable ones. Both sets bring messages home; every
// message is handled once, on attempt 2, and none is lost.
func TestDurableRungPikaPeerOnClassicRungs(t *testing.T) {
	py := pikaPython(t)
	b, _ := consBroker(t)
	const wait = 2 * time.Second
	p := retry.Fixed(2, wait, retry.InProcessLimit(0), retry.DurableRungs())
	q := testenv.Queue(t, b, p)
	testenv.CleanupDerived(t, q, retry.Fixed(2, wait, retry.InProcessLimit(0)))
	var calls rungCalls
	c := rungConsumer(t, b, q, p, func(_ context.Context, d *mq.Delivery) error {
		if calls.add(d).attempt == 1 {
			return errors.New("fails on attempt 1")
		}
		return nil
	})
	defer testenv.Stop(t, c)

	ctx := testenv.Context(t, 90*time.Second)
	cmd := exec.CommandContext(ctx, py, filepath.Join("testdata", "pika_rung_peer.py"), testenv.URL(), q, "2000", "20")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The peer consumes once it has declared its classic rung.
	old := topology.RungQueue(q, wait)
	if !testenv.Poll(30*time.Second, func() bool {
		ok, err := b.QueueExists(testenv.Context(t, 5*time.Second), old)
		return err == nil && ok
	}) {
		t.Fatalf("the pika peer did not declare %s (stderr: %s)", old, stderr.String())
	}
	time.Sleep(time.Second)
	const n = 40
	for i := range n {
		testenv.Publish(t, b, q, consMessages(fmt.Sprintf("peer%d", i), 1)...)
		time.Sleep(20 * time.Millisecond)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("pika_rung_peer.py: %v\nstdout: %s\nstderr: %s", err, stdout.String(), stderr.String())
	}
	var peer struct {
		Hopped  []string `json:"hopped"`
		Handled []struct {
			ID      string `json:"id"`
			Attempt int    `json:"attempt"`
			From    string `json:"from"`
		} `json:"handled"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &peer); err != nil {
		t.Fatalf("pika_rung_peer.py printed %q: %v", stdout.String(), err)
	}
	rung := topology.DurableRungQueue(q, wait)
	handled := map[string]int{}
	via := map[string]int{}
	for _, h := range peer.Handled {
		handled[h.ID]++
		via[h.From]++
		if h.Attempt != 2 {
			t.Errorf("the peer handled %s on attempt %d, want 2", h.ID, h.Attempt)
		}
	}
	calls.mu.Lock()
	goHopped := 0
	for _, c := range calls.calls {
		if c.attempt == 1 {
			goHopped++
			continue
		}
		handled[c.id]++
		via[c.from]++
		if c.attempt != 2 {
			t.Errorf("Go handled %s on attempt %d, want 2", c.id, c.attempt)
		}
	}
	calls.mu.Unlock()
	for i := range n {
		id := fmt.Sprintf("peer%d-0", i)
		if handled[id] != 1 {
			t.Errorf("%s handled %d times on attempt 2, want once", id, handled[id])
		}
	}
	t.Logf("hops: %d by the peer (classic), %d by Go (durable); came home from: %v", len(peer.Hopped), goHopped, via)
	if len(peer.Hopped) == 0 || goHopped == 0 || via[old] == 0 || via[rung] == 0 || via[old]+via[rung] != n {
		t.Errorf("came home from %v, hops %d by the peer and %d by Go: want both rung kinds to bring messages home, %d in all", via, len(peer.Hopped), goHopped, n)
	}
	for _, name := range []string{q, old, rung, topology.DeadLetterQueue(q)} {
		if k := testenv.Count(t, b, name); k != 0 {
			t.Errorf("%s holds %d messages, want none", name, k)
		}
	}
}
