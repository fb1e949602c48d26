package mq

// How a session tells what ended it, beyond a plain lost channel (serve):
// a broker cancel of a queue that stays (queueStays), handlers cut short by
// a loss (awaitCut), and a stream queue declared outside the Broker, found
// at its first delivery (refuses, isStream; errStreamConsume, in
// consume.go, is what the consumer ends with).

import (
	"context"
	"errors"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// headerStreamOffset is the header RabbitMQ puts on every message it
// delivers from a stream over AMQP 0-9-1: the message's offset, an int64
// (measured on 3.10, 4.0 and 4.3).
const headerStreamOffset = "x-stream-offset"

// refuses is called by a worker for every delivery before anything else
// sees it (hooks, middleware, handler), and reports whether the delivery
// is not to be handled. A stream declared outside the Broker is not known
// to Consume (errStreamConsume), and queue.declare-ok says nothing of a
// queue's type, so it is found here, at its first delivery: it carries
// x-stream-offset. A message copied from a stream into a queue (by a
// shovel, say) may carry the header too, so the broker is asked once
// (isStream): only a stream answers that it has no consumer while this one
// reads it. A stream ends the session and the consumer with ErrInvalid
// (s.ends, Consumer.run); a queue that cannot be told from one ends the
// session, and the consumer subscribes again, as after any interruption,
// and the next session asks again. Either
// way no delivery with the header is handled, and none is given back with
// a nack (noRelease): on 3.10 a nack of a stream's delivery is a
// connection error (540 NOT_IMPLEMENTED) that would take the Broker's
// connection down, and on 4.x it is an ack.
func (s *session) refuses(l *lane, raw *amqp.Delivery) bool {
	if _, ok := raw.Headers[headerStreamOffset]; !ok {
		return false
	}
	s.offsetMu.Lock()
	defer s.offsetMu.Unlock()
	if s.asked || s.refusing {
		return s.refusing
	}
	if s.isDraining() {
		// Stopping or lost: not the time to ask. The channel's close gives
		// it back.
		s.noRelease.Store(true)
		return true
	}
	s.asked = true
	stream, err := s.isStream(l)
	if err == nil && !stream {
		return false
	}
	s.refusing = true
	s.noRelease.Store(true)
	why := fmt.Sprintf("a delivery carried %s, and the queue could not be told from a stream: %v", headerStreamOffset, err)
	if stream {
		s.ends = fmt.Errorf("mq: consumer of %q: its deliveries carry %s: %w", s.c.queue, headerStreamOffset, errStreamConsume)
		why = s.ends.Error()
	}
	s.refused <- why // the only send: refusing is set once
	return true
}

// refusal is the error the consumer ends with when refuses found its queue
// is a stream; nil if it did not.
func (s *session) refusal() error {
	s.offsetMu.Lock()
	defer s.offsetMu.Unlock()
	return s.ends
}

// isStream asks the broker whether the session's queue is a stream: a
// passive queue.declare on a throwaway channel, while this consumer reads
// it on l. A classic or quorum queue counts this consumer; a stream
// reports none. A quorum queue whose leader is slow to answer reports none
// too, so a stream is one that answers none streamAsks times running, a
// pause apart, this session still consuming; any other count says it is no
// stream. An error, or a session lost meanwhile, cannot tell.
func (s *session) isStream(l *lane) (bool, error) {
	ctx, cancel := context.WithTimeout(s.ctx, streamAskWait)
	defer cancel()
	var err error
	zeros := 0
	for i := range streamAsks {
		if i > 0 {
			select {
			case <-time.After(streamAskPause):
			case <-ctx.Done():
				return false, ctx.Err()
			}
		}
		var n int
		if n, err = s.c.b.consumerCount(ctx, s.c.queue); err == nil {
			if n > 0 {
				return false, nil
			}
			zeros++
		}
	}
	if zeros < streamAsks {
		return false, err
	}
	if s.ctx.Err() != nil || l.ch.IsClosed() {
		return false, errors.New("the channel was lost while the broker was asked")
	}
	return true, nil
}

// How isStream asks: streamAsks times, streamAskPause apart, all within
// streamAskWait.
const (
	streamAsks     = 3
	streamAskPause = 300 * time.Millisecond
	streamAskWait  = 5 * time.Second
)

// queueStays reports whether the consumer's queue still exists after the
// broker cancelled its consumer, asked on a throwaway channel within a few
// seconds; an answer that does not come counts as gone (the cancel of a
// deleted queue, handled as before).
func (s *session) queueStays() bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ok, err := s.c.b.QueueExists(ctx, s.c.queue)
	return err == nil && ok
}

// awaitCut waits, after a loss, for the handlers whose contexts it cut,
// at most lostGrace: a handler that ignores its context must not keep the
// consumer from resubscribing. One still running then is the consumer's
// to wait for (Consumer.outlive); it holds its slot until it returns, and
// settles on a channel that is gone (the broker has requeued its delivery).
func (s *session) awaitCut(workersDone <-chan struct{}) {
	t := time.NewTimer(lostGrace)
	defer t.Stop()
	select {
	case <-workersDone:
	case <-t.C:
		s.c.log.Warn("acemq.consumer.handler.stuck", "after", lostGrace)
		s.c.outlive(workersDone)
	}
}

// lostGrace is how long a session that lost its channel waits for its
// handlers, their contexts cancelled, before the consumer resubscribes
// without them.
const lostGrace = time.Second
