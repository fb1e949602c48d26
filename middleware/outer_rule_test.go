package middleware

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/mqtest"
	"github.com/acemq/acemq-go/retry"
)

// outerView is what the app's outermost middleware read when next
// returned.
type outerView struct {
	calls   int
	err     error
	outcome mq.Outcome
	attempt int
}

func (v *outerView) middleware(next mq.Handler) mq.Handler {
	return mq.HandlerFunc(func(ctx context.Context, d *mq.Delivery) error {
		v.calls++
		err := next.Handle(ctx, d)
		v.err, v.outcome, v.attempt = err, d.Outcome(), d.Attempt()
		return err
	})
}

// TestOuterSeesWhatWasCarriedOut holds the library to mq.Middleware's
// rule on every path a unit can reach: the app's outermost middleware is
// called once per delivery, and when next returns d.Outcome() is set,
// never empty, and is the outcome the delivery is settled with and the
// one Logging writes; d.Attempt() is the last attempt that ran (the one
// Logging writes), or for a delivery no attempt ran on, the attempt it
// came with.
func TestOuterSeesWhatWasCarriedOut(t *testing.T) {
	inProcess := retry.Waits(10*time.Millisecond, 20*time.Millisecond)
	brokerFirst := retry.Waits(time.Minute).With(retry.InProcessLimit(0))
	fails := func(n int) func(int) error {
		return func(a int) error {
			if a <= n {
				return fmt.Errorf("attempt %d: %w", a, errBoom)
			}
			return nil
		}
	}
	// suppress is an inbox's duplicate: it answers without calling next.
	suppress := func(mq.Handler) mq.Handler {
		return mq.HandlerFunc(func(context.Context, *mq.Delivery) error { return nil })
	}
	cases := []struct {
		name     string
		p        retry.Policy
		standard bool // Standard around the handler (else nothing)
		inner    mq.Middleware
		handle   func(attempt int) error
		refuse   string // a queue whose hop fails
		cutWait  bool   // the in-process wait is cut short by a lost channel
		outcome  mq.Outcome
		attempt  int // d.Attempt() after next
		logged   bool
	}{
		{name: "ack", p: inProcess, standard: true, handle: fails(0), outcome: mq.OutcomeAck, attempt: 1, logged: true},
		{name: "in-process retry then ack", p: inProcess, standard: true, handle: fails(2), outcome: mq.OutcomeAck, attempt: 3, logged: true},
		{name: "rung hop", p: brokerFirst, standard: true, handle: fails(9), outcome: mq.OutcomeRetry, attempt: 1, logged: true},
		{name: "dlq", p: inProcess, standard: true, handle: fails(9), outcome: mq.OutcomeDeadLetter, attempt: 3, logged: true},
		{name: "park", p: inProcess, standard: true, handle: func(int) error { return Park(errBoom) }, outcome: mq.OutcomePark, attempt: 1, logged: true},
		{name: "requeue", p: inProcess, standard: true, handle: func(int) error { return mq.Requeue(errBoom) }, outcome: mq.OutcomeRequeue, attempt: 1, logged: true},
		{name: "refused set-aside", p: inProcess, standard: true, handle: func(int) error { return Park(errBoom) }, refuse: "q.parked", outcome: mq.OutcomeRequeue, attempt: 1, logged: true},
		{name: "requeue after a cut", p: inProcess, standard: true, handle: fails(9), cutWait: true, outcome: mq.OutcomeRequeue, attempt: 1, logged: true},
		{name: "inbox duplicate", p: inProcess, standard: true, inner: suppress, handle: fails(9), outcome: mq.OutcomeAck, attempt: 1, logged: true},
		{name: "reject, no ladder", handle: fails(9), outcome: mq.OutcomeReject, attempt: 1},
		{name: "requeue, no ladder", handle: func(int) error { return mq.Requeue(errBoom) }, outcome: mq.OutcomeRequeue, attempt: 1},
		{name: "ack, no ladder", handle: fails(0), outcome: mq.OutcomeAck, attempt: 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var v outerView
			opts := []mq.ConsumerOption{mq.WithMiddleware(v.middleware)}
			if tc.standard {
				opts = append(opts, Standard(tc.p, WithoutDeclare()))
			}
			if tc.inner != nil {
				opts = append(opts, mq.WithMiddleware(tc.inner))
			}
			h := mq.HandlerFunc(func(_ context.Context, d *mq.Delivery) error { return tc.handle(d.Attempt()) })
			r, err := mq.NewRunner(h, nil, opts...)
			if err != nil {
				t.Fatal(err)
			}
			w := newWorld()
			w.logs.level = slog.LevelDebug // Logging writes an ack at debug
			if tc.refuse != "" {
				w.fail = func(q string) error {
					if q == tc.refuse {
						return mq.ErrNacked
					}
					return nil
				}
			}
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			d := w.delivery("q", amqp.Delivery{MessageId: "m1", RoutingKey: "q"})
			if tc.cutWait {
				d = mqtest.NewDelivery("q", amqp.Delivery{MessageId: "m1", RoutingKey: "q"},
					mqtest.Logger(slogOf(w)),
					mqtest.OnWait(func(context.Context, time.Duration) error {
						cancel() // the channel is lost while the message waits
						return context.Canceled
					}))
			}
			settledErr := r.Deliver(ctx, d)
			final := d.Outcome()
			if v.calls != 1 {
				t.Errorf("outer middleware called %d times, want 1", v.calls)
			}
			if v.outcome == "" {
				t.Errorf("next returned (err %v) with an empty Outcome(); the delivery was settled %q", v.err, final)
			}
			if v.outcome != final {
				t.Errorf("outer middleware read Outcome() %q, the delivery was settled %q (err %v)", v.outcome, final, settledErr)
			}
			if final != tc.outcome {
				t.Errorf("settled %q, want %q", final, tc.outcome)
			}
			if v.attempt != tc.attempt {
				t.Errorf("outer middleware read Attempt() %d after next, want %d", v.attempt, tc.attempt)
			}
			rec, ok := w.logs.find("acemq.message.settled")
			if ok != tc.logged {
				t.Fatalf("Logging wrote acemq.message.settled: %v, want %v", ok, tc.logged)
			}
			if ok {
				a := attrs(rec)
				if got := a["outcome"].String(); got != string(final) {
					t.Errorf("Logging wrote outcome=%s, the delivery was settled %q", got, final)
				}
				if got := int(a["attempt"].Int64()); got != v.attempt {
					t.Errorf("Logging wrote attempt=%d, the outer middleware read %d", got, v.attempt)
				}
			}
		})
	}
}

// slogOf is w's logger.
func slogOf(w *world) *slog.Logger { return slog.New(w.logs) }

// TestPanicAfterCarriedFateAcknowledges: a middleware outside Standard
// panics (or fails) after next returned, the message already confirmed in
// .dlq. The
// fate carried out stands: the original is acknowledged (the landed code
// requeued it, and the broker brought it back for ever).
func TestPanicAfterCarriedFateAcknowledges(t *testing.T) {
	errHandler := errors.New("handler failed")
	isHandlers := func(err error) bool { return errors.Is(err, errHandler) }
	for _, tc := range []struct {
		name    string
		handle  func(int) error
		outcome mq.Outcome
		settled func(error) bool
		err     error // what the outer middleware returns instead of panicking
	}{
		// The chain settled these itself (r.Err is then the cause it hopped
		// for, the handler's error, not the outer middleware's failure).
		{name: "an error after a dead letter", handle: func(int) error { return errHandler }, outcome: mq.OutcomeDeadLetter, settled: isHandlers, err: errBoom},
		{name: "after a dead letter", handle: func(int) error { return errHandler }, outcome: mq.OutcomeDeadLetter, settled: isHandlers},
		{name: "after a park", handle: func(int) error { return Park(errHandler) }, outcome: mq.OutcomePark, settled: isHandlers},
		// Nothing was carried out yet after a plain success: the handler's
		// work is not known to be kept (an outer transaction may not have
		// committed), so the message goes back, as at-least-once says.
		{name: "after a success", handle: func(int) error { return nil }, outcome: mq.OutcomeRequeue, settled: isRequeue},
	} {
		t.Run(tc.name, func(t *testing.T) {
			panicky := func(next mq.Handler) mq.Handler {
				return mq.HandlerFunc(func(ctx context.Context, d *mq.Delivery) error {
					err := next.Handle(ctx, d)
					if tc.err != nil {
						return tc.err
					}
					if d != nil {
						panic("outer middleware broke")
					}
					return err
				})
			}
			h := mq.HandlerFunc(func(_ context.Context, d *mq.Delivery) error { return tc.handle(d.Attempt()) })
			c := mqtest.New(t, "q", h, mq.WithMiddleware(panicky), Standard(retry.Waits(time.Millisecond), WithoutDeclare()))
			r := c.Deliver(mq.Message{MessageId: "m1"})
			if r.Outcome != tc.outcome || !tc.settled(r.Err) {
				t.Errorf("settled %q (err %v), want %q", r.Outcome, r.Err, tc.outcome)
			}
		})
	}
}
