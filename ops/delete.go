package ops

import (
	"context"
	"errors"
	"fmt"

	"github.com/acemq/acemq-go/mq"
)

// Delete removes the first message of queue that match accepts, looking at
// no more messages than the queue held when it started. It takes them one
// at a time with basic.get without acknowledging; the one matched is
// acknowledged (and so gone), and every other message it looked at goes
// back to where it was when its channel closes (marked redelivered). It
// reports whether a message was deleted; errors.Is(err, mq.ErrNotFound)
// when the queue does not exist. Meant for a .dlq or .parked queue: on a
// quorum queue every look counts as a delivery.
func Delete(ctx context.Context, b *mq.Broker, queue string, match func(Peeked) bool) (bool, error) {
	if match == nil {
		return false, errors.New("ops: delete: match is nil")
	}
	info, err := inspect(ctx, b, queue)
	if err != nil {
		return false, fmt.Errorf("ops: delete: %w", err)
	}
	ch, err := b.Channel(ctx)
	if err != nil {
		return false, fmt.Errorf("ops: delete from %q: %w", queue, err)
	}
	defer ch.Close() // returns every message looked at and not matched
	for pos := 1; pos <= info.Messages; pos++ {
		d, ok, err := get(ctx, ch, queue)
		if err != nil {
			return false, fmt.Errorf("ops: delete from %q: %w", queue, err)
		}
		if !ok {
			return false, nil
		}
		if !match(peeked(queue, pos, d)) {
			continue
		}
		if err := d.Ack(false); err != nil {
			return false, fmt.Errorf("ops: delete from %q: the ack was lost, the message stays: %w", queue, err)
		}
		return true, nil
	}
	return false, nil
}

// Purge removes every ready message from queue and reports how many went
// (queue.purge: messages a consumer holds unacknowledged are not touched).
// errors.Is(err, mq.ErrNotFound) when the queue does not exist.
func Purge(ctx context.Context, b *mq.Broker, queue string) (int, error) {
	if _, err := inspect(ctx, b, queue); err != nil {
		return 0, fmt.Errorf("ops: purge: %w", err)
	}
	ch, err := b.Channel(ctx)
	if err != nil {
		return 0, fmt.Errorf("ops: purge %q: %w", queue, err)
	}
	defer ch.Close()
	stop := context.AfterFunc(ctx, func() { _ = ch.Close() })
	n, err := ch.QueuePurge(queue, false)
	if !stop() {
		return 0, fmt.Errorf("ops: purge %q: %w", queue, ctx.Err())
	}
	if err != nil {
		return 0, fmt.Errorf("ops: purge %q: %w", queue, refusal("purge queue", err))
	}
	return n, nil
}
