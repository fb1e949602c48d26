package middleware

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/mqtest"
	"github.com/acemq/acemq-go/retry"
)

func TestRecover(t *testing.T) {
	w := newWorld()
	s := &script{panics: map[int]any{0: "kaboom"}}
	err := mqtest.Chain(s, nil, Recover()).Handle(context.Background(), w.delivery("q", sample(nil)))
	var pe *mq.PanicError
	if !errors.As(err, &pe) || pe.Value != "kaboom" || len(pe.Stack) == 0 {
		t.Fatalf("Handle = %#v, want *mq.PanicError with a stack", err)
	}
	rec, ok := w.logs.find("acemq.handler.panic")
	if !ok || rec.Level != slog.LevelError || attrs(rec)["panic"].String() != "kaboom" || attrs(rec)["stack"].String() == "" {
		t.Errorf("log record %v %v", rec.Level, attrs(rec))
	}

	cause := errors.New("inner")
	s = &script{panics: map[int]any{0: cause}}
	err = mqtest.Chain(s, nil, Recover()).Handle(context.Background(), w.delivery("q", sample(nil)))
	if !errors.Is(err, cause) {
		t.Errorf("a panic with an error value = %v, want it to unwrap to that error", err)
	}
}

func TestRecoverIsRetriedByTheLadder(t *testing.T) {
	w := newWorld()
	s := &script{panics: map[int]any{0: "kaboom"}}
	err := mqtest.Chain(s, nil, RetryLadder(retry.Fixed(3, time.Millisecond)), Parking(), Recover()).
		Handle(context.Background(), w.delivery("q", sample(nil)))
	if err != nil {
		t.Fatalf("Handle = %v", err)
	}
	if !slices.Equal(s.attempts, []int{1, 2}) || len(w.hops) != 0 {
		t.Errorf("attempts %v, hops %+v", s.attempts, w.hops)
	}
	if len(w.events) != 1 || w.events[0].Name != mq.EventRetry {
		t.Errorf("events %+v", w.events)
	}
	var pe *mq.PanicError
	if !errors.As(w.events[0].Err, &pe) {
		t.Errorf("the retried error is %T, want *mq.PanicError", w.events[0].Err)
	}
}

func TestTimeout(t *testing.T) {
	waitCtx := mq.HandlerFunc(func(ctx context.Context, _ *mq.Delivery) error {
		<-ctx.Done()
		return ctx.Err()
	})
	d := newWorld().delivery("q", sample(nil))

	start := time.Now()
	err := Timeout(20*time.Millisecond)(waitCtx).Handle(context.Background(), d)
	if !errors.Is(err, ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("timed-out attempt = %v, want ErrTimeout and DeadlineExceeded", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("took %v", took)
	}

	lateSuccess := mq.HandlerFunc(func(context.Context, *mq.Delivery) error {
		time.Sleep(30 * time.Millisecond)
		return nil
	})
	if err := Timeout(5*time.Millisecond)(lateSuccess).Handle(context.Background(), d); err != nil {
		t.Errorf("a late success = %v, want nil: the work is done", err)
	}

	ownErr := mq.HandlerFunc(func(context.Context, *mq.Delivery) error { return errBoom })
	if err := Timeout(time.Second)(ownErr).Handle(context.Background(), d); err != errBoom {
		t.Errorf("an error before the deadline = %v, want it unchanged", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Timeout(time.Second)(waitCtx).Handle(ctx, d); errors.Is(err, ErrTimeout) || !errors.Is(err, context.Canceled) {
		t.Errorf("a cancelled consumer = %v: not a timeout", err)
	}

	s := &script{}
	if h := Timeout(0)(s); h != mq.Handler(s) {
		t.Error("Timeout(0) must return the handler unchanged")
	}
}

func TestTimeoutIsPerAttempt(t *testing.T) {
	w := newWorld()
	calls := 0
	h := mq.HandlerFunc(func(ctx context.Context, _ *mq.Delivery) error {
		calls++
		if calls == 1 {
			<-ctx.Done()
			return ctx.Err()
		}
		return ctx.Err() // a fresh deadline: nil
	})
	err := mqtest.Chain(h, nil, RetryLadder(retry.Fixed(2, time.Millisecond)), Parking(), Recover(), Timeout(30*time.Millisecond)).
		Handle(context.Background(), w.delivery("q", sample(nil)))
	if err != nil || calls != 2 {
		t.Errorf("Handle = %v after %d calls", err, calls)
	}
}

// outcomeSetter stands for an inner middleware deciding an outcome: a hop
// (carried out by the consumer) when o is set, else ret.
func outcomeSetter(o mq.Outcome, ret error) mq.Handler {
	return mq.HandlerFunc(func(_ context.Context, d *mq.Delivery) error {
		switch o {
		case mq.OutcomeRetry:
			return &mq.Decision{Outcome: o, Queue: d.Queue() + ".retry.1s", Wait: time.Second, Cause: errBoom}
		case mq.OutcomePark:
			return &mq.Decision{Outcome: o, Queue: d.Queue() + ".parked", Reason: mq.ReasonParked, Cause: errBoom}
		case mq.OutcomeDeadLetter:
			return &mq.Decision{Outcome: o, Queue: d.Queue() + ".dlq", Reason: mq.ReasonRejected, Cause: errBoom}
		}
		return ret
	})
}

func TestLoggingLevels(t *testing.T) {
	cases := []struct {
		name    string
		inner   mq.Handler
		level   slog.Level
		outcome mq.Outcome
		cause   bool
		none    bool
	}{
		{"ack", outcomeSetter("", nil), slog.LevelDebug, mq.OutcomeAck, false, false},
		{"retry", outcomeSetter(mq.OutcomeRetry, nil), slog.LevelInfo, mq.OutcomeRetry, true, false},
		{"park", outcomeSetter(mq.OutcomePark, nil), slog.LevelWarn, mq.OutcomePark, true, false},
		{"dead letter", outcomeSetter(mq.OutcomeDeadLetter, nil), slog.LevelWarn, mq.OutcomeDeadLetter, true, false},
		{"requeue", outcomeSetter("", mq.Requeue(errBoom)), slog.LevelWarn, mq.OutcomeRequeue, true, false},
		{"escaping error", outcomeSetter("", errBoom), 0, "", false, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rec := &logRecorder{level: slog.LevelDebug}
			w := newWorld()
			w.logger = consumerLogger(rec, "orders")
			d := w.delivery("orders", sample(nil))
			err := mqtest.Chain(c.inner, nil, Logging()).Handle(context.Background(), d)
			if c.none {
				if err != errBoom || len(rec.all()) != 0 {
					t.Errorf("Handle = %v, records %d: an escaping error is the runtime's to log", err, len(rec.all()))
				}
				return
			}
			all := rec.all()
			if len(all) != 1 || all[0].Message != "acemq.message.settled" || all[0].Level != c.level {
				t.Fatalf("records %+v, want one acemq.message.settled at %v", all, c.level)
			}
			a := attrs(all[0])
			if a["outcome"].String() != string(c.outcome) || a["message_id"].String() != "msg-1" || a["attempt"].Int64() != 1 || a["queue"].String() != "orders" {
				t.Errorf("attrs %v", a)
			}
			if _, ok := a["took"]; !ok {
				t.Error("no took")
			}
			if _, ok := a["cause"]; ok != c.cause {
				t.Errorf("cause present %v, want %v", ok, c.cause)
			}
		})
	}
}

func TestLoggingAtInfoSkipsAcks(t *testing.T) {
	rec := &logRecorder{level: slog.LevelInfo}
	w := newWorld()
	w.logger = slog.New(rec)
	d := w.delivery("orders", sample(nil))
	if err := mqtest.Chain(outcomeSetter("", nil), nil, Logging()).Handle(context.Background(), d); err != nil || len(rec.all()) != 0 {
		t.Errorf("Handle = %v, %d records", err, len(rec.all()))
	}
}

func TestLoggingWritesToTheDeliverysLogger(t *testing.T) {
	w := newWorld()
	w.logs.level = slog.LevelDebug
	if err := mqtest.Chain(outcomeSetter("", nil), nil, Logging()).Handle(context.Background(), w.delivery("orders", sample(nil))); err != nil {
		t.Fatal(err)
	}
	rec, ok := w.logs.find("acemq.message.settled")
	if !ok {
		t.Fatal("no record on the delivery's logger")
	}
	if _, has := attrs(rec)["queue"]; has {
		t.Error("the consumer's logger already says the queue")
	}
}

func TestStandardOrder(t *testing.T) {
	typesOf := func(mws []mq.Middleware) []string {
		var out []string
		for _, mw := range mws {
			out = append(out, fmt.Sprintf("%T", mw(nopHandler)))
		}
		return out
	}
	p := retry.Fixed(3, time.Millisecond)
	if got, want := typesOf(standardStack(p, nil)), []string{"*middleware.declarer", "*middleware.logging", "*middleware.ladder", "*middleware.parking", "*middleware.recoverer"}; !slices.Equal(got, want) {
		t.Errorf("Standard = %v, want %v", got, want)
	}
	stack := standardStack(p, []StandardOption{WithoutDeclare(), WithTimeout(time.Second), WithClassifier(func(error) mq.Outcome { return "" }), nil})
	if got, want := typesOf(stack), []string{"*middleware.logging", "*middleware.ladder", "*middleware.parking", "*middleware.recoverer", "*middleware.timeout"}; !slices.Equal(got, want) {
		t.Errorf("Standard(WithoutDeclare, WithTimeout) = %v, want %v", got, want)
	}
	if pk := stack[2](nopHandler).(*parking); len(pk.classify) != 1 {
		t.Error("WithClassifier did not reach Parking")
	}
	if lad := stack[1](nopHandler).(*ladder); !lad.p.Equal(p) {
		t.Error("the ladder runs another policy")
	}
}

func TestStandardBehaviour(t *testing.T) {
	// A panic, then a Park on the retry: Recover sits inside the ladder (the
	// panic is retried), Parking inside the ladder (the park happens on the
	// attempt that failed), and Logging outside (it reports the outcome).
	w := newWorld()
	rec := w.logs
	rec.level = slog.LevelDebug
	s := &script{panics: map[int]any{0: "kaboom"}, results: []error{nil, Park(errBoom)}}
	h := mqtest.Chain(s, nil, standardStack(retry.Fixed(5, time.Millisecond), nil)...)
	d := w.delivery("q", sample(nil))
	if err := h.Handle(context.Background(), d); err != nil {
		t.Fatalf("Handle = %v", err)
	}
	if !slices.Equal(s.attempts, []int{1, 2}) {
		t.Errorf("attempts %v", s.attempts)
	}
	if len(w.hops) != 1 || w.hops[0].queue != "q.parked" {
		t.Errorf("hops %+v", w.hops)
	}
	var all []slog.Record // Logging's records (the delivery's logger has the ladder's and Recover's too)
	for _, r := range rec.all() {
		if r.Message == "acemq.message.settled" {
			all = append(all, r)
		}
	}
	if len(all) != 1 || all[0].Level != slog.LevelWarn || attrs(all[0])["outcome"].String() != string(mq.OutcomePark) || attrs(all[0])["attempt"].Int64() != 2 {
		t.Errorf("records %+v", all)
	}
}
