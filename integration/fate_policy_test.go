//go:build integration

package integration

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/acemq/acemq-go/internal/testenv"
	"github.com/acemq/acemq-go/middleware"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/retry"
	"github.com/acemq/acemq-go/topology"
)

// The policy is written once: a consumer whose ladder runs another policy
// than the one the Broker declared its queue with (topology.Retry) is
// refused at Consume, before it subscribes, since the rungs declared would
// not be the rungs used; the declared policy itself is taken.
func TestFatePolicyWrittenOnce(t *testing.T) {
	b, _ := consBroker(t)
	declared := retry.Exponential(3, time.Second)
	q := testenv.Name(t)
	testenv.CleanupDerived(t, q, declared)
	if err := b.Declare(testenv.Context(t, 15*time.Second), topology.New().Queue(q, topology.DeadLetter(), topology.Retry(declared))); err != nil {
		t.Fatal(err)
	}
	h := mq.HandlerFunc(func(context.Context, *mq.Delivery) error { return nil })
	c, err := b.Consume(testenv.Context(t, 20*time.Second), q, h, middleware.Standard(retry.Fixed(5, 2*time.Second)))
	if err == nil {
		testenv.Stop(t, c)
		t.Fatal("Consume with a ladder that differs from the declared policy succeeded")
	}
	if !errors.Is(err, mq.ErrInvalid) {
		t.Errorf("Consume = %v, want ErrInvalid", err)
	}
	c, err = b.Consume(testenv.Context(t, 20*time.Second), q, h, middleware.Standard(declared))
	if err != nil {
		t.Fatalf("Consume with the declared policy: %v", err)
	}
	testenv.Stop(t, c)
}
