package mq

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/retry"
	"github.com/acemq/acemq-go/topology"
)

// Declare validates t, then declares its exchanges, queues and bindings in
// that order, on a throwaway channel: a refusal kills only that channel,
// never a publisher's or a consumer's. Declaring is idempotent, so a
// service declares its topology on every boot; it never deletes anything.
//
// A quorum queue declared without a dead-letter route is reported
// ([EventDeadLetterMissing], a warning): past its delivery limit the broker
// drops a returned message instead of dead-lettering it.
//
// A refusal is a *[BrokerError] naming the item, the reply code and the
// broker's reason: errors.Is(err, [ErrPreconditionFailed]) when an existing
// queue has different arguments. A connection lost midway is waited out and
// the declaration run again, bounded by ctx.
//
// A queue marked [topology.Existing] (declared elsewhere) is checked with
// a passive declare instead: [ErrNotFound] when it is missing. The Broker
// remembers it, so a later declaration that derives it (a consumer's own
// failure half, topology.ForConsumer) checks it too. A derived queue
// (.dlq, .parked, a rung) refused with PRECONDITION_FAILED is named with
// that way out: another owner declared it with other arguments.
//
// The Broker remembers what it declared. On every new connection, before
// any consumer resubscribes, it declares again the exclusive, auto-delete
// and transient queues and exchanges among them, with their bindings: the
// broker deletes those with a connection (or a restart); an exclusive or
// auto-delete queue its consumers consumed and none consumes now is left
// out (the broker deleted it: nobody needs it). A queue of theirs
// found missing under its consumer (deleted, the consumer cancelled) is
// declared again with its bindings and failure half, and the consumer
// resubscribes. Durable things are not declared again on a reconnect.
// [Config.NoRedeclare] turns this off; docs/recovery.md says more.
func (b *Broker) Declare(ctx context.Context, t *topology.Topology) error {
	if t == nil {
		return errors.New("mq: declare: nil topology")
	}
	if err := t.Validate(); err != nil {
		return err
	}
	exchanges, queues, bindings := t.Exchanges(), t.Queues(), t.Bindings()
	for i, q := range queues {
		if !q.Existing && b.reg.existing(q.Name) {
			queues[i] = topology.Queue{Name: q.Name, Retry: q.Retry, HasRetry: q.HasRetry, Existing: true}
		}
	}
	// The builder checks names; the argument tables go through the same
	// validator as message headers, so none can fail the frame.
	var errs []error
	for _, e := range exchanges {
		errs = append(errs, checkTable(fmt.Sprintf("arguments of exchange %q", e.Name), e.Args))
	}
	for _, q := range queues {
		errs = append(errs, checkTable(fmt.Sprintf("arguments of queue %q", q.Name), q.Args))
	}
	for _, bd := range bindings {
		errs = append(errs, checkTable(fmt.Sprintf("arguments of the binding of %q to %q", bd.Queue, bd.Exchange), bd.Args))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("mq: declare: %w", err)
	}
	for _, q := range queues {
		if _, routed := q.Args[topology.ArgDeadLetterExchange]; q.Args[topology.ArgQueueType] == "quorum" && !routed {
			limit := "the broker's default (RabbitMQ 4.x: 20)"
			if l, ok := q.Args["x-delivery-limit"]; ok {
				limit = fmt.Sprint(l)
			}
			b.log.Warn(EventDeadLetterMissing, "queue", q.Name, "delivery_limit", limit)
		}
	}
	d := declaration{exchanges: exchanges, queues: queues, bindings: bindings}
	if err := b.onChannel(ctx, "declare topology", d.on); err != nil {
		return ownedElsewhere(err)
	}
	b.reg.note(d) // what the broker forgets is declared again (recovery.go)
	return nil
}

// ownedElsewhere adds to a PRECONDITION_FAILED on a derived queue (.dlq,
// .parked, a rung) the way to say it belongs to someone else.
func ownedElsewhere(err error) error {
	var be *BrokerError
	if !errors.As(err, &be) || be.Code != codePreconditionFailed {
		return err
	}
	name, ok := strings.CutPrefix(be.Op, "declare queue ")
	if !ok {
		return err
	}
	if name, uerr := strconv.Unquote(name); uerr == nil {
		_, _, _, rung := topology.ParseRung(name)
		if rung || strings.HasSuffix(name, topology.DeadLetterSuffix) || strings.HasSuffix(name, topology.ParkedSuffix) {
			return fmt.Errorf("%w (declared elsewhere with other arguments? say so, and the queue is checked instead of declared: .Queue(%q, topology.Existing()))", err, name)
		}
	}
	return err
}

// QueueExists reports whether queue exists (a passive declare on a
// throwaway channel: NOT_FOUND is false; any other failure is an error). A
// name over 255 bytes is [ErrInvalid], as in every call here that
// takes a queue name.
func (b *Broker) QueueExists(ctx context.Context, queue string) (bool, error) {
	if err := checkName("queue name", queue); err != nil {
		return false, err
	}
	err := b.onChannel(ctx, fmt.Sprintf("inspect queue %q", queue), func(ch *amqp.Channel) (string, error) {
		_, err := ch.QueueDeclarePassive(queue, false, false, false, false, nil)
		return fmt.Sprintf("inspect queue %q", queue), err
	})
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// consumerCount is the number of consumers queue.declare-ok (passive)
// reports for queue. A stream reports none, even while it is read (3.10,
// 4.0 and 4.3 alike); a quorum queue whose leader does not answer within
// 250 ms reports none too (rabbit_quorum_queue:stat).
func (b *Broker) consumerCount(ctx context.Context, queue string) (int, error) {
	var n int
	err := b.onChannel(ctx, fmt.Sprintf("inspect queue %q", queue), func(ch *amqp.Channel) (string, error) {
		q, err := ch.QueueDeclarePassive(queue, false, false, false, false, nil)
		n = q.Consumers
		return fmt.Sprintf("inspect queue %q", queue), err
	})
	if err != nil {
		return 0, err // n may still be written by a call ctx cut short
	}
	return n, nil
}

// DeleteQueue deletes queue and every message in it, returning how many
// messages went with it. Destructive: for tests and tooling. Deleting a
// queue that does not exist is not an error. A queue deleted this way is
// no longer declared again by the Broker (see Declare).
func (b *Broker) DeleteQueue(ctx context.Context, queue string) (int, error) {
	if err := checkName("queue name", queue); err != nil {
		return 0, err
	}
	var n int
	err := b.onChannel(ctx, fmt.Sprintf("delete queue %q", queue), func(ch *amqp.Channel) (string, error) {
		var err error
		n, err = ch.QueueDelete(queue, false, false, false)
		return fmt.Sprintf("delete queue %q", queue), err
	})
	if err != nil {
		return 0, err
	}
	b.reg.forget(queue) // deleted on purpose: not to be declared again
	return n, nil
}

// onChannel runs fn on a throwaway channel. fn returns what it was doing
// when it failed. A channel exception is final (and named); a lost
// connection is waited out and fn run again on the next one, bounded by
// ctx, which also cuts a call the broker never answers (the channel is
// then closed once it does, or dies with the connection).
func (b *Broker) onChannel(ctx context.Context, what string, fn func(*amqp.Channel) (string, error)) error {
	for {
		ch, st, err := b.channel(ctx)
		if err != nil {
			return err
		}
		var op string
		err = b.bounded(ctx, func() (err error) {
			op, err = fn(ch)
			return err
		}, func() { _ = ch.Close() })
		if err == nil {
			b.closeLater(ch)
			return nil
		}
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			return fmt.Errorf("mq: %s: %w", what, err) // fn is still running
		}
		b.closeLater(ch)
		if ctx.Err() != nil {
			return fmt.Errorf("mq: %s: %w", op, ctx.Err())
		}
		if !channelLevel(err) && st.isLost() {
			select {
			case <-st.lost:
				continue
			case <-ctx.Done():
				return fmt.Errorf("mq: %s: %w", op, ctx.Err())
			}
		}
		return brokerError(op, err)
	}
}

// declaredRetry is the retry policy the service declared queue with through
// this Broker (topology.Retry), and whether it declared one.
func (r *remembered) declaredRetry(queue string) (retry.Policy, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, q := range r.queues {
		if q.Name == queue && q.HasRetry {
			return q.Retry, true
		}
	}
	return retry.Policy{}, false
}

// errPolicyTwice refuses a consumer whose chain runs another retry policy
// than the one the Broker declared its queue with: the rungs declared
// would not be the rungs used. The policy is written once, in the
// topology.
func (b *Broker) errPolicyTwice(queue string, r *Runner) error {
	run, ok := r.RetryPolicy()
	if !ok {
		return nil
	}
	if declared, ok := b.reg.declaredRetry(queue); ok && !run.Equal(declared) {
		return fmt.Errorf("%w: the chain runs retry policy %s, but the Broker declared queue %q with Retry(%s): write the policy once", ErrInvalid, run, queue, declared)
	}
	return nil
}
