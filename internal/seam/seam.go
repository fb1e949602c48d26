package seam

import (
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"sync"
	"time"
)

var registry sync.Map // reflect.Type of the function → the function

// Set registers f under its type. mq calls it from init.
func Set[F any](f F) { registry.Store(reflect.TypeFor[F](), f) }

// Get returns the function registered under type F. It panics when none
// is: a caller that imports mq has had mq's init run, so a missing entry
// is a bug in this module, not in a program using it.
func Get[F any]() F {
	v, ok := registry.Load(reflect.TypeFor[F]())
	if !ok {
		panic(fmt.Sprintf("seam: nothing registered as %v", reflect.TypeFor[F]()))
	}
	return v.(F)
}

// Delivery is what a test delivery does instead of talking to a broker.
// M, E and K are mq.Message, mq.Event and mq.HopKind (this package cannot
// name them).
type Delivery[M, E, K any] struct {
	// Forward replaces the hop publish.
	Forward func(ctx context.Context, queue string, kind K, m M) error
	// Emit replaces the broker's EventHooks.
	Emit func(ctx context.Context, e E)
	// Log is the delivery's logger.
	Log *slog.Logger
	// Wait replaces the timer of Delivery.Wait (mqtest's fake clock).
	Wait Waiter
}

// Waiter waits d in-process in place of a timer (a fake clock): nil once
// waited, ctx's error when cut short.
type Waiter func(ctx context.Context, d time.Duration) error
