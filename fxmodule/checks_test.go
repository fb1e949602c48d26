package fxmodule

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/fx"

	"github.com/acemq/acemq-go/mq"
)

func probe(h http.Handler) (int, string) {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	return rec.Code, rec.Body.String()
}

// A check fed with AsCheck is run by ReadyHandler(b) for the app's broker,
// without the app naming it again: its failure makes the answer 503 with
// its name and reason, next to the broker's own problem, and a passing
// check's detail is reported too.
func TestReadyHandlerRunsAppChecks(t *testing.T) {
	var b *mq.Broker
	app := fx.New(fx.NopLogger, fx.Supply(cfg()), Module,
		AsCheck(func() Check {
			return Check{Name: "db", Check: func(context.Context) (string, error) { return "", errors.New("connection refused") }}
		}),
		AsCheck(func() (Check, error) {
			return Check{Name: "lag", Check: func(context.Context) (string, error) { return "3 rows behind", nil }}, nil
		}),
		fx.Populate(&b))
	if err := app.Err(); err != nil {
		t.Fatal(err)
	}
	defer b.Close(context.Background())
	code, body := probe(ReadyHandler(b))
	want := "mq: not ready: the broker was not started (call Start first)\nmq: not ready: db: connection refused\nlag: 3 rows behind\n"
	if code != http.StatusServiceUnavailable || body != want {
		t.Fatalf("readyz: %d %q, want 503 %q", code, body, want)
	}
	// Another broker has none of the app's checks.
	if _, body := probe(ReadyHandler(mq.New(cfg()))); strings.Contains(body, "db") {
		t.Fatalf("readyz of another broker: %q", body)
	}
}

// Checks given to ReadyHandler run too, for an app without fx; one that
// does not answer within CheckTimeout is a problem, reported without
// waiting for it beyond the probe's own context.
func TestReadyHandlerGivenChecks(t *testing.T) {
	b := mq.New(cfg())
	defer b.Close(context.Background())
	release := make(chan struct{})
	defer close(release)
	slow := Check{Name: "slow", Check: func(context.Context) (string, error) { <-release; return "", nil }} // deaf to its context
	ok := Check{Name: "fine", Check: func(context.Context) (string, error) { return "", nil }}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond) // stands in for CheckTimeout
	defer cancel()
	rec := httptest.NewRecorder()
	ReadyHandler(b, slow, ok).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil).WithContext(ctx))
	body := rec.Body.String()
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(body, "mq: not ready: slow: no answer in time") || !strings.Contains(body, "fine: ok") {
		t.Fatalf("readyz: %d %q", rec.Code, body)
	}
}

// A check without a name or a func, or a constructor of something else,
// fails the app's build naming it.
func TestAsCheckRefusesBadChecks(t *testing.T) {
	for name, tc := range map[string]struct {
		opt  fx.Option
		want string
	}{
		"no name":      {AsCheck(func() Check { return Check{Check: func(context.Context) (string, error) { return "", nil }} }), "Name is empty"},
		"no func":      {AsCheck(func() Check { return Check{Name: "db"} }), `check "db": Check is nil`},
		"not a Check":  {AsCheck(func() string { return "db" }), "fxmodule.AsCheck"},
		"not a constr": {AsCheck(Check{Name: "db"}), "fxmodule.AsCheck"},
	} {
		var b *mq.Broker
		err := fx.New(fx.NopLogger, fx.Supply(cfg()), Module, tc.opt, fx.Populate(&b)).Err()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", name, err, tc.want)
		}
		if b != nil {
			_ = b.Close(context.Background())
		}
	}
}
