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
	// Wait replaces the timer of an in-process wait (mqtest's fake clock).
	// mq does not read it yet: today the ladder finds the waiter in its
	// context (WithWaiter). Once Delivery has a Wait method with a seam of
	// its own, newSeamDelivery (mq/seam.go) sets that seam from this field
	// and WithWaiter goes; mqtest already fills both with the same function.
	Wait Waiter
}

// Waiter waits d in-process in place of a timer (a fake clock): nil once
// waited, ctx's error when cut short.
type Waiter func(ctx context.Context, d time.Duration) error

type waiterKey struct{}

// WithWaiter returns ctx carrying w. Only mqtest calls it: the key is
// unexported and the package internal, so production code cannot.
//
// The retry ladder's in-process wait reads it (middleware/ladder.go, func
// wait). This is the one place the fake clock reaches the runtime: when
// the Delivery gets its own Wait with a test seam, mqtest sets that seam
// through Delivery instead and this key goes.
func WithWaiter(ctx context.Context, w Waiter) context.Context {
	return context.WithValue(ctx, waiterKey{}, w)
}

// WaiterFrom returns the Waiter ctx carries, or nil.
func WaiterFrom(ctx context.Context) Waiter {
	w, _ := ctx.Value(waiterKey{}).(Waiter)
	return w
}
