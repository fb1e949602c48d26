package middleware_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/internal/conformance"
	"github.com/acemq/acemq-go/middleware"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/mqtest"
	"github.com/acemq/acemq-go/topology"
)

// conformance/hops.json without a broker: each case's delivery runs through
// the ladder, Parking and Recover as Standard stacks them, and the copy
// handed to Forward — what the hop would publish — is checked against the
// case. The integration suite runs the same file against the broker
// (TestConformanceHops); this one makes a broken hop a failing `go test`.
func TestConformanceHopsWithoutBroker(t *testing.T) {
	var v conformance.Hops
	if err := conformance.Load("hops.json", &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Cases) == 0 {
		t.Fatal("hops.json has no cases")
	}
	for _, c := range v.Cases {
		t.Run(c.Name, func(t *testing.T) {
			run, target := hopWithoutBroker(t, c)
			if want := run.Vars.Fill(c.Target); target != want {
				t.Fatalf("the copy went to %s, the vector says %s", target, want)
			}
			for _, f := range conformance.CheckHeaders(c.HeaderCase, run) {
				t.Error(f)
			}
			// And an altered copy of the case fails against the same run.
			for h, e := range map[string]conformance.Expect{
				"x-acemq-attempt":      {Is: conformance.Typed(`{"longstr": "` + fmt.Sprint(run.Got["x-acemq-attempt"]) + `"}`)},
				"x-acemq-source-queue": {Absent: true},
			} {
				hc := c.HeaderCase
				hc.Headers = map[string]conformance.Expect{h: e}
				for k, x := range c.Headers {
					if k != h {
						hc.Headers[k] = x
					}
				}
				if f := conformance.CheckHeaders(hc, run); len(f) == 0 {
					t.Errorf("altered %s: the runner passed it", h)
				}
			}
		})
	}
}

func hopWithoutBroker(t *testing.T, c conformance.HopCase) (conformance.Run, string) {
	t.Helper()
	p, err := c.Policy.Policy()
	if err != nil {
		t.Fatal(err)
	}
	vars := conformance.Vars{"queue": "orders.conformance", "exchange": "orders-events", "key": "order.placed"}
	q := vars["queue"]
	incoming, err := conformance.DecodeTable(c.Incoming, vars)
	if err != nil {
		t.Fatal(err)
	}
	rungsExist := c.RungsDeclared == nil || *c.RungsDeclared
	var target string
	var got amqp.Table
	forward := mqtest.OnHop(func(_ context.Context, queue string, _ mq.Outcome, m mq.Message) error {
		if strings.Contains(queue, topology.RetrySegment) && !rungsExist {
			return mq.ErrUnroutable
		}
		if target != "" {
			t.Errorf("a second copy, to %s (the first went to %s)", queue, target)
		}
		target, got = queue, m.Headers
		return nil
	})
	cause := errors.New(c.Error)
	calls := 0
	h := mq.HandlerFunc(func(context.Context, *mq.Delivery) error {
		calls++
		switch c.Handler {
		case "park":
			return middleware.Park(cause)
		case "reject":
			return middleware.Reject(cause)
		}
		return cause
	})
	raw := amqp.Delivery{Exchange: vars["exchange"], RoutingKey: vars["key"], Headers: incoming, Body: []byte("x")}
	d := mqtest.NewDelivery(q, raw, forward, mqtest.OnEvent(func(context.Context, mq.Event) {}),
		mqtest.Logger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	chain := mqtest.Chain(h, nil, middleware.RetryLadder(p), middleware.Parking(), middleware.Recover())
	from := time.Now()
	if err := chain.Handle(context.Background(), d); err != nil {
		t.Fatalf("the chain returned %v; every case ends in a confirmed hop", err)
	}
	if calls != 1 {
		t.Errorf("the handler was called %d times, want once", calls)
	}
	if target == "" {
		t.Fatal("nothing was forwarded")
	}
	return conformance.Run{Vars: vars, Window: conformance.Window{From: from, To: time.Now()}, Got: got, BrokerAdded: nil}, target
}
