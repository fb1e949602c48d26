package mq

import "context"

// Sender is what code that publishes needs from a publisher: *[Publisher] is
// one, a test fakes it (mqtest.Publisher records what it is given), and
// fxmodule.AsPublisher provides an interface of this shape.
type Sender interface {
	// Publish sends m with routingKey and returns once it is safe (see
	// [Publisher.Publish]).
	Publish(ctx context.Context, routingKey string, m Message) error
}

var _ Sender = (*Publisher)(nil)
