package ops

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/mq"
)

// Filter selects messages by what the library recorded about them. Every
// field that is set must match; the zero Filter matches every message.
type Filter struct {
	// Reason matches x-acemq-reason exactly (exhausted, rejected, parked,
	// rung-missing).
	Reason string
	// Error matches when x-acemq-error contains this text.
	Error string
	// MessageId matches the message id exactly.
	MessageId string
	// OlderThan matches messages that failed (x-acemq-failed-at, else
	// their timestamp) longer ago than this. A message with neither does
	// not match.
	OlderThan time.Duration
	// Now is the time OlderThan counts back from. Default time.Now.
	Now func() time.Time
	// Where, when set, must also accept the message (the console's groups).
	Where func(Peeked) bool
}

// IsZero reports whether f matches every message.
func (f Filter) IsZero() bool {
	return f.Reason == "" && f.Error == "" && f.MessageId == "" && f.OlderThan == 0 && f.Where == nil
}

// Match reports whether p passes f.
func (f Filter) Match(p Peeked) bool {
	switch {
	case f.Reason != "" && p.Reason != f.Reason,
		f.Error != "" && !strings.Contains(p.Error, f.Error),
		f.MessageId != "" && p.MessageId != f.MessageId:
		return false
	}
	if f.OlderThan > 0 {
		at := p.FailedAt
		if at.IsZero() {
			at = p.Timestamp
		}
		now := time.Now
		if f.Now != nil {
			now = f.Now
		}
		if at.IsZero() || now().Sub(at) <= f.OlderThan {
			return false
		}
	}
	return f.Where == nil || f.Where(p)
}

func (f Filter) matches(queue string, d amqp.Delivery) bool {
	return f.IsZero() || f.Match(peeked(queue, 0, d))
}

// PeekMatching is Peek that shows only the messages f matches: it looks
// at every message in the queue (as many as it held when the peek began)
// and returns the first n that match, each with its position in the
// queue. Like Peek it takes nothing: every message is returned to where
// it was.
func PeekMatching(ctx context.Context, b *mq.Broker, queue string, n int, f Filter) ([]Peeked, error) {
	if f.IsZero() {
		return Peek(ctx, b, queue, n)
	}
	if n < 1 {
		return nil, fmt.Errorf("ops: peek %q: n is %d, must be at least 1", queue, n)
	}
	info, err := inspect(ctx, b, queue)
	if err != nil {
		return nil, fmt.Errorf("ops: peek: %w", err)
	}
	return peek(ctx, b, queue, n, info.Messages, f)
}

// Purge deletes every ready message in queue and returns how many went.
// Destructive. errors.Is(err, mq.ErrNotFound) when the queue does not
// exist.
func Purge(ctx context.Context, b *mq.Broker, queue string) (int, error) {
	if _, err := inspect(ctx, b, queue); err != nil {
		return 0, fmt.Errorf("ops: purge: %w", err)
	}
	ch, err := b.Channel(ctx)
	if err != nil {
		return 0, fmt.Errorf("ops: purge %q: %w", queue, err)
	}
	defer closeChannel(ctx, ch)
	var n int
	err = call(ctx, func() (err error) {
		n, err = ch.QueuePurge(queue, false)
		return err
	})
	if ctx.Err() != nil && err == ctx.Err() {
		return 0, fmt.Errorf("ops: purge %q: %w", queue, err)
	}
	if err != nil {
		return 0, refusal(fmt.Sprintf("purge queue %q", queue), err)
	}
	return n, nil
}

// ErrNoMessage is matched by Delete's error when no message in the queue
// matches.
var ErrNoMessage = errors.New("ops: no such message")

// Delete takes the messages f matches out of queue for good and returns
// how many it deleted; every other message it looked at goes back to where
// it was at the end (marked redelivered; see Peek). It looks at as many
// messages as the queue held when it began. Destructive: a zero Filter is
// refused (Purge empties a queue). ErrNoMessage when none matches;
// errors.Is(err, mq.ErrNotFound) when the queue does not exist. Meant for a
// .dlq or .parked queue: on a quorum queue up to RabbitMQ 4.2 every look
// counts as a delivery.
func Delete(ctx context.Context, b *mq.Broker, queue string, f Filter) (int, error) {
	return deleteUpTo(ctx, b, queue, f, 0)
}

// deleteUpTo is Delete that stops once it deleted limit messages (0: no
// limit), so the messages after the last one it deletes are not taken.
func deleteUpTo(ctx context.Context, b *mq.Broker, queue string, f Filter, limit int) (int, error) {
	if f.IsZero() {
		return 0, errors.New("ops: delete: the filter matches every message (use Purge)")
	}
	info, err := inspect(ctx, b, queue)
	if err != nil {
		return 0, fmt.Errorf("ops: delete: %w", err)
	}
	ch, err := b.Channel(ctx)
	if err != nil {
		return 0, fmt.Errorf("ops: delete from %q: %w", queue, err)
	}
	h := &holding{ctx: ctx, ch: ch}
	defer h.close() // returns every other message, in place
	deleted := 0
	for pos := 1; pos <= info.Messages && (limit == 0 || deleted < limit); pos++ {
		d, ok, err := get(ctx, ch, queue)
		if err != nil {
			return deleted, fmt.Errorf("ops: delete from %q: %w", queue, err)
		}
		if !ok {
			break
		}
		if !f.Match(peeked(queue, pos, d)) {
			h.keep(d.DeliveryTag)
			continue
		}
		if err := d.Ack(false); err != nil {
			return deleted, fmt.Errorf("ops: delete from %q: the ack was lost, the message stays: %w", queue, err)
		}
		deleted++
	}
	if deleted == 0 {
		return 0, fmt.Errorf("%w in %q", ErrNoMessage, queue)
	}
	return deleted, nil
}
