package mqtest_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/middleware"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/mqtest"
	"github.com/acemq/acemq-go/retry"
)

// 6 attempts: waits 10s, 20s (in-process, 30 s limit), then 40s, 80s, 160s
// on broker rungs.
var policy = retry.Exponential(6, 10*time.Second)

// failing fails the first n calls with err, then succeeds.
func failing(n int, err error) mq.Handler {
	calls := 0
	return mq.HandlerFunc(func(context.Context, *mq.Delivery) error {
		calls++
		if calls <= n {
			return err
		}
		return nil
	})
}

var errDown = errors.New("billing is down")

func TestAck(t *testing.T) {
	c := mqtest.New(t, "orders", failing(0, nil), middleware.Standard(policy))
	r := c.Deliver(mq.Message{Body: []byte("x")})
	if r.Outcome != mq.OutcomeAck || r.Err != nil || r.Attempts != 1 || len(r.Hops) != 0 || len(r.Waits) != 0 {
		t.Fatalf("result %v (%+v), want a plain ack after one attempt", r, r)
	}
}

// In-process retries advance the fake clock instead of sleeping: 30 s of
// waits take no time.
func TestInProcessRetriesUseTheFakeClock(t *testing.T) {
	c := mqtest.New(t, "orders", failing(2, errDown), middleware.Standard(policy))
	began := time.Now()
	r := c.Deliver(mq.Message{})
	if took := time.Since(began); took > 50*time.Millisecond {
		t.Errorf("Deliver took %v: the waits were slept", took)
	}
	if r.Outcome != mq.OutcomeAck || r.Attempts != 3 {
		t.Fatalf("result %v, want an ack on attempt 3", r)
	}
	if want := []time.Duration{10 * time.Second, 20 * time.Second}; !slices.Equal(r.Waits, want) {
		t.Errorf("waits %v, want %v", r.Waits, want)
	}
	if got, want := c.Now(), mqtest.Epoch.Add(30*time.Second); !got.Equal(want) {
		t.Errorf("clock at %v, want %v", got, want)
	}
}

// The third failure goes to the 40s rung with the contract's headers.
func TestRungHop(t *testing.T) {
	c := mqtest.New(t, "orders", failing(3, errDown), middleware.Standard(policy))
	r := c.Deliver(mq.Message{MessageId: "m-1", Body: []byte("x"), Headers: amqp.Table{"k": "v"}})
	if r.Outcome != mq.OutcomeRetry || r.Attempts != 3 || len(r.Hops) != 1 {
		t.Fatalf("result %v, want one retry hop after 3 attempts", r)
	}
	h := r.Hops[0]
	if h.Queue != "orders.retry.40s" || h.Kind != mq.OutcomeRetry || h.Attempt() != 4 ||
		h.Message.Headers[mq.HeaderSourceQueue] != "orders" || h.Message.Headers["k"] != "v" ||
		h.Message.MessageId != "m-1" || string(h.Message.Body) != "x" {
		t.Fatalf("hop %+v", h)
	}
	// The rung brings it home as attempt 4: it succeeds.
	r = c.Deliver(h.Message)
	if r.Outcome != mq.OutcomeAck || r.Attempts != 1 {
		t.Fatalf("after the rung: %v, want an ack", r)
	}
}

// Run follows the message through every rung to .dlq: 6 attempts, the
// clock advanced by the whole schedule.
func TestRunToDeadLetter(t *testing.T) {
	c := mqtest.New(t, "orders", failing(100, errDown), middleware.Standard(policy))
	began := time.Now()
	rs := c.Run(mq.Message{MessageId: "m-1"})
	took := time.Since(began)
	if len(rs) != 4 {
		t.Fatalf("%d deliveries, want 4 (home, 40s, 80s, 160s rungs back): %v", len(rs), rs)
	}
	last := rs[len(rs)-1]
	if last.Outcome != mq.OutcomeDeadLetter || len(last.Hops) != 1 {
		t.Fatalf("last result %v, want a dead letter", last)
	}
	dl := last.Hops[0]
	if dl.Queue != "orders.dlq" || dl.Reason() != mq.ReasonExhausted || dl.Error() != errDown.Error() || dl.Attempt() != 7 {
		t.Fatalf("dead letter %+v (reason %q, error %q, attempt %d)", dl, dl.Reason(), dl.Error(), dl.Attempt())
	}
	var queues []string
	for _, h := range c.Hops() {
		queues = append(queues, h.Queue)
	}
	if want := []string{"orders.retry.40s", "orders.retry.80s", "orders.retry.160s", "orders.dlq"}; !slices.Equal(queues, want) {
		t.Errorf("hops %v, want %v", queues, want)
	}
	if got, want := c.Now().Sub(mqtest.Epoch), 310*time.Second; got != want {
		t.Errorf("fake time %v, want %v (the whole schedule)", got, want)
	}
	t.Logf("six attempts and four hops in %v", took)
	if took > 50*time.Millisecond {
		t.Errorf("Run took %v", took)
	}
}

func TestParkAndReject(t *testing.T) {
	for name, c := range map[string]struct {
		err    error
		queue  string
		reason mq.Reason
		out    mq.Outcome
	}{
		"park":   {middleware.Park(errors.New("address unknown")), "orders.parked", mq.ReasonParked, mq.OutcomePark},
		"reject": {middleware.Reject(errors.New("bad order")), "orders.dlq", mq.ReasonRejected, mq.OutcomeDeadLetter},
	} {
		t.Run(name, func(t *testing.T) {
			r := mqtest.New(t, "orders", failing(100, c.err), middleware.Standard(policy)).Deliver(mq.Message{})
			if r.Outcome != c.out || r.Attempts != 1 || len(r.Hops) != 1 {
				t.Fatalf("result %v, want %s after one attempt", r, c.out)
			}
			h := r.Hops[0]
			if h.Queue != c.queue || h.Reason() != c.reason || h.Error() != errors.Unwrap(c.err).Error() {
				t.Fatalf("hop to %s, reason %q, error %q", h.Queue, h.Reason(), h.Error())
			}
		})
	}
}

// A missing rung sets the message aside in .dlq (reason rung-missing); a
// .dlq that cannot be reached keeps the set-aside pending on a copy in the
// queue (x-acemq-pending-hop), and the original is acknowledged.
func TestRefusedHops(t *testing.T) {
	c := mqtest.New(t, "orders", failing(100, errDown), middleware.Standard(policy))
	c.Refuse("orders.retry.40s", mq.ErrUnroutable)
	r := c.Deliver(mq.Message{})
	if r.Outcome != mq.OutcomeDeadLetter || len(r.Hops) != 1 || r.Hops[0].Reason() != mq.ReasonRungMissing {
		t.Fatalf("result %v, want a rung-missing dead letter", r)
	}
	if !slices.ContainsFunc(r.Events, func(e mq.Event) bool { return e.Name == mq.EventRungMissing }) {
		t.Errorf("events %+v, want %s", r.Events, mq.EventRungMissing)
	}
	c.Refuse("orders.dlq", mq.ErrUnroutable)
	r = c.Deliver(mq.Message{})
	if r.Outcome != mq.OutcomeRequeue || r.Err != nil || len(r.Hops) != 1 || r.Hops[0].Queue != "orders" ||
		r.Hops[0].Message.Headers["x-acemq-pending-hop"] != "orders.dlq" {
		t.Fatalf("result %v, want the set-aside kept pending on a copy in orders", r)
	}
	// Delivered again, to a new process, the copy makes the set-aside, not
	// another attempt.
	r = mqtest.New(t, "orders", failing(100, errDown), middleware.Standard(policy)).Deliver(r.Hops[0].Message)
	if r.Outcome != mq.OutcomeDeadLetter || r.Attempts != 0 || len(r.Hops) != 1 || r.Hops[0].Queue != "orders.dlq" || r.Hops[0].Attempt() != 4 {
		t.Fatalf("result %v, want the pending set-aside made, with no attempt", r)
	}
}

// Without the standard stack, an error escapes and is rejected; a panic
// that escapes is requeued, as the runtime does, never rejected (on a queue
// with no dead-letter route that would drop the message).
func TestBareHandler(t *testing.T) {
	r := mqtest.New(t, "orders", failing(1, errDown)).Deliver(mq.Message{})
	if r.Outcome != mq.OutcomeReject || !errors.Is(r.Err, errDown) {
		t.Fatalf("result %v, want a reject", r)
	}
	r = mqtest.New(t, "orders", mq.HandlerFunc(func(context.Context, *mq.Delivery) error { panic("boom") })).Deliver(mq.Message{})
	var pe *mq.PanicError
	if r.Outcome != mq.OutcomeRequeue || !errors.As(r.Err, &pe) || !errors.Is(r.Err, mq.ErrRequeue) {
		t.Fatalf("result %v, want a recovered panic requeued", r)
	}
}

// The attempt a delivery carries is read as a consumer reads it.
func TestAttemptFromHeaders(t *testing.T) {
	var seen []int
	h := mq.HandlerFunc(func(_ context.Context, d *mq.Delivery) error {
		seen = append(seen, d.Attempt())
		return errDown
	})
	r := mqtest.New(t, "orders", h, middleware.Standard(policy)).Deliver(mq.Message{Headers: amqp.Table{mq.HeaderAttempt: int32(6)}})
	if !slices.Equal(seen, []int{6}) || r.Outcome != mq.OutcomeDeadLetter {
		t.Fatalf("attempts seen %v, result %v: want attempt 6, the last, dead-lettered", seen, r)
	}
}

// A policy the ladder refuses fails New, as it would fail Consume.
func TestInvalidPolicyFailsNew(t *testing.T) {
	ft := &fatalRecorder{TB: t}
	func() {
		defer func() { _ = recover() }()
		mqtest.New(ft, "orders", failing(0, nil), middleware.Standard(retry.Fixed(3, 1500*time.Millisecond+40*time.Second)))
	}()
	if !ft.failed {
		t.Fatal("New accepted a policy with a broker rung that is not whole seconds")
	}
}

type fatalRecorder struct {
	testing.TB
	failed bool
}

func (f *fatalRecorder) Fatalf(string, ...any) { f.failed = true; panic("fatal") }
func (f *fatalRecorder) Fatal(...any)          { f.failed = true; panic("fatal") }
func (f *fatalRecorder) Helper()               {}

func TestPublisher(t *testing.T) {
	var p mqtest.Publisher
	if err := p.Publish(context.Background(), "order.placed", mq.Message{Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	p.Err = mq.ErrUnroutable
	if err := p.Publish(context.Background(), "order.paid", mq.Message{}); !errors.Is(err, mq.ErrUnroutable) {
		t.Fatalf("Publish = %v, want Err", err)
	}
	got := p.Messages()
	if len(got) != 2 || got[0].RoutingKey != "order.placed" || string(got[0].Message.Body) != "x" || got[1].RoutingKey != "order.paid" {
		t.Fatalf("messages %+v", got)
	}
}

// A panic in the handler under Standard is retried like an error and
// then hops to a rung: the chain returns nil, having settled the delivery
// itself, yet the result says why: Err is the panic (*mq.PanicError), not
// only the hop's header.
func TestPanicUnderStandardIsTheResultsErr(t *testing.T) {
	h := mq.HandlerFunc(func(context.Context, *mq.Delivery) error {
		var tx *struct{ n int }
		tx.n++ // a nil transaction: the inbox forgotten
		return nil
	})
	r := mqtest.New(t, "orders", h, middleware.Standard(policy)).Deliver(mq.Message{MessageId: "m-1"})
	var pe *mq.PanicError
	if r.Outcome != mq.OutcomeRetry || !errors.As(r.Err, &pe) || !strings.Contains(r.Err.Error(), "nil pointer dereference") {
		t.Fatalf("result %v (Err %v), want a retry whose Err is the panic", r, r.Err)
	}
	// A handler's error settled by a hop is the result's Err as well.
	r = mqtest.New(t, "orders", failing(100, errDown), middleware.Standard(policy)).Deliver(mq.Message{})
	if r.Outcome != mq.OutcomeRetry || !errors.Is(r.Err, errDown) {
		t.Fatalf("result %v, want a retry whose Err is the handler's error", r)
	}
}
