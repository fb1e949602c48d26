package mq

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/topology"
)

// What the broker forgets, the library declares again.
//
// The broker deletes an exclusive queue with the connection that declared
// it, an auto-delete queue with its last consumer (whose channel dies with
// the connection), an auto-delete exchange with its last binding, and
// anything transient when it restarts. A service that declared such things
// at start would, after one reconnect, consume from nothing. So the Broker
// remembers what went through Declare (the fx topology included) and:
//
//   - on every new connection, before it is handed to anyone (so before any
//     consumer resubscribes), declares again the exclusive, auto-delete and
//     transient queues and exchanges it remembers, with the bindings of
//     those queues and the bindings to those exchanges (Broker.recoverOn),
//     except an exclusive or auto-delete queue that a consumer of this
//     Broker consumed and none consumes now: the broker deleted it because
//     nobody uses it (its last consumer stopped, or the connection that
//     owned it closed), and declared again it would collect what is
//     published to its exchanges for ever, consumed by nobody;
//   - when a subscribe finds its queue missing (NOT_FOUND: the queue was
//     deleted under its consumer, the broker cancelled the consumer), and
//     the queue is one it remembers, declares that queue again with its
//     bindings and its failure half, then subscribes again
//     (Broker.redeclareMissing).
//
// Durable queues and exchanges are not declared again on every reconnect:
// they outlive connections, and a service with many queues would make a
// recovering cluster answer one declare per queue per instance at the
// moment it is busiest. The one way a durable queue goes is deletion, and
// a consumer finds that out by itself (the second path). A queue the
// service deletes itself (Broker.DeleteQueue) is forgotten.
// Config.NoRedeclare turns both paths off.

// remembered is what the service declared through its Broker, last
// declaration winning, in the order first met, and which queues a consumer
// of the Broker has consumed. Its lock is a leaf.
type remembered struct {
	mu        sync.Mutex
	exchanges []topology.Exchange
	queues    []topology.Queue
	bindings  []topology.Binding
	consumed  map[string]bool // queues a Consume of this Broker subscribed to
}

// declaration is a list of things to declare, in the order declared:
// exchanges, then queues, then bindings.
type declaration struct {
	exchanges []topology.Exchange
	queues    []topology.Queue
	bindings  []topology.Binding
}

func (d declaration) empty() bool {
	return len(d.exchanges)+len(d.queues)+len(d.bindings) == 0
}

// on declares d on ch, stopping at the first refusal, and returns what it
// was doing then.
func (d declaration) on(ch *amqp.Channel) (string, error) {
	for _, e := range d.exchanges {
		if err := ch.ExchangeDeclare(e.Name, string(e.Kind), e.Durable, e.AutoDelete, e.Internal, false, e.Args); err != nil {
			return fmt.Sprintf("declare exchange %q", e.Name), err
		}
	}
	for _, q := range d.queues {
		if q.Existing {
			if _, err := ch.QueueDeclarePassive(q.Name, false, false, false, false, nil); err != nil {
				return fmt.Sprintf("check queue %q (declared elsewhere, topology.Existing)", q.Name), err
			}
			continue
		}
		if _, err := ch.QueueDeclare(q.Name, q.Durable, q.AutoDelete, q.Exclusive, false, q.Args); err != nil {
			return fmt.Sprintf("declare queue %q", q.Name), err
		}
	}
	for _, bd := range d.bindings {
		if err := ch.QueueBind(bd.Queue, bd.Key, bd.Exchange, false, bd.Args); err != nil {
			return fmt.Sprintf("declare binding of queue %q to exchange %q on %q", bd.Queue, bd.Exchange, bd.Key), err
		}
	}
	return "", nil
}

// queueNames lists the queues d declares.
func (d declaration) queueNames() []string {
	out := make([]string, len(d.queues))
	for i, q := range d.queues {
		out[i] = q.Name
	}
	return out
}

func bindingKey(b topology.Binding) string {
	return b.Queue + "\x00" + b.Exchange + "\x00" + b.Key + "\x00" + fmt.Sprint(b.Args)
}

// note remembers what d declared.
func (r *remembered) note(d declaration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range d.exchanges {
		if i := slices.IndexFunc(r.exchanges, func(x topology.Exchange) bool { return x.Name == e.Name }); i >= 0 {
			r.exchanges[i] = e
		} else {
			r.exchanges = append(r.exchanges, e)
		}
	}
	for _, q := range d.queues {
		if i := slices.IndexFunc(r.queues, func(x topology.Queue) bool { return x.Name == q.Name }); i >= 0 {
			r.queues[i] = q
		} else {
			r.queues = append(r.queues, q)
		}
	}
	for _, b := range d.bindings {
		k := bindingKey(b)
		if !slices.ContainsFunc(r.bindings, func(x topology.Binding) bool { return bindingKey(x) == k }) {
			r.bindings = append(r.bindings, b)
		}
	}
}

// queueType is the x-queue-type the service declared queue with through
// this Broker ("" when it declared none, or did not declare the queue).
func (r *remembered) queueType(queue string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, q := range r.queues {
		if q.Name == queue {
			t, _ := q.Args[topology.ArgQueueType].(string)
			return t
		}
	}
	return ""
}

// forget drops queue and its bindings: the service deleted it.
func (r *remembered) forget(queue string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.queues = slices.DeleteFunc(r.queues, func(q topology.Queue) bool { return q.Name == queue })
	r.bindings = slices.DeleteFunc(r.bindings, func(b topology.Binding) bool { return b.Queue == queue })
	delete(r.consumed, queue)
}

// noteConsumed remembers that a consumer of this Broker subscribed to
// queue, if it is a queue declared through the Broker (so the set grows no
// larger than what is remembered): from then on, an exclusive or
// auto-delete queue is declared again at a reconnect only while a consumer
// runs on it (see lost).
func (r *remembered) noteConsumed(queue string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !slices.ContainsFunc(r.queues, func(q topology.Queue) bool { return q.Name == queue }) {
		return
	}
	if r.consumed == nil {
		r.consumed = map[string]bool{}
	}
	r.consumed[queue] = true
}

// forgets reports whether the broker forgets q with a connection (or a
// restart): exclusive, auto-delete or transient. A queue declared
// elsewhere (Existing) is its owner's to keep.
func forgets(q topology.Queue) bool {
	return !q.Existing && (q.Exclusive || q.AutoDelete || !q.Durable)
}

// existing reports whether queue was declared through this Broker as one
// declared elsewhere (topology.Existing).
func (r *remembered) existing(queue string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.ContainsFunc(r.queues, func(q topology.Queue) bool { return q.Name == queue && q.Existing })
}

// unused reports whether the broker deleted q because nobody uses it: q is
// exclusive or auto-delete, a consumer of this Broker consumed it, and none
// runs on it now (running: the queues of the consumers not stopping). Its
// last consumer's stop deleted an auto-delete queue; the end of the
// connection that owned it, an exclusive one. r.mu is held.
func (r *remembered) unused(q topology.Queue, running map[string]bool) bool {
	return (q.Exclusive || q.AutoDelete) && r.consumed[q.Name] && !running[q.Name]
}

// lost is what a new connection must declare again: the exclusive,
// auto-delete and transient queues and exchanges, the bindings of those
// queues and to those exchanges, and the (durable) exchanges those
// bindings need, so that none fails for want of its exchange. An unused
// queue (running: the queues consumers of this Broker consume now) is left
// out, with its bindings: nobody needs it.
func (r *remembered) lost(running map[string]bool) declaration {
	r.mu.Lock()
	defer r.mu.Unlock()
	var d declaration
	lostQ, lostE, unused := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for _, q := range r.queues {
		if r.unused(q, running) {
			unused[q.Name] = true
			continue
		}
		if forgets(q) {
			lostQ[q.Name] = true
			d.queues = append(d.queues, q)
		}
	}
	for _, e := range r.exchanges {
		if e.AutoDelete || !e.Durable {
			lostE[e.Name] = true
		}
	}
	need := map[string]bool{}
	for _, b := range r.bindings {
		if !unused[b.Queue] && (lostQ[b.Queue] || lostE[b.Exchange]) {
			d.bindings = append(d.bindings, b)
			need[b.Exchange] = true
		}
	}
	for _, e := range r.exchanges {
		if lostE[e.Name] || need[e.Name] {
			d.exchanges = append(d.exchanges, e)
		}
	}
	return d
}

// group is what declaring queue again takes: the queue, its failure half
// as remembered (.dlq, .parked, the rungs of its policy), the bindings of
// all of them, and the exchanges those bindings need. ok is false if the
// queue is not remembered.
func (r *remembered) group(queue string) (declaration, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	i := slices.IndexFunc(r.queues, func(q topology.Queue) bool { return q.Name == queue })
	if i < 0 {
		return declaration{}, false
	}
	src := r.queues[i]
	names := []string{queue, topology.DeadLetterQueue(queue), topology.ParkedQueue(queue)}
	for _, w := range src.Retry.BrokerRungs() {
		names = append(names, topology.Rung(queue, src.Retry, w).Name)
	}
	var d declaration
	for _, q := range r.queues {
		if slices.Contains(names, q.Name) {
			d.queues = append(d.queues, q)
		}
	}
	in := d.queueNames()
	need := map[string]bool{}
	for _, b := range r.bindings {
		if slices.Contains(in, b.Queue) {
			d.bindings = append(d.bindings, b)
			need[b.Exchange] = true
		}
	}
	for _, e := range r.exchanges {
		if need[e.Name] {
			d.exchanges = append(d.exchanges, e)
		}
	}
	return d, true
}

// running is the set of queues the Broker's consumers consume now: those
// registered, not stopping and not ended.
func (b *Broker) running() map[string]bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make(map[string]bool, len(b.consumers))
	for c := range b.consumers {
		if !c.isStopping() && !c.ended() {
			out[c.queue] = true
		}
	}
	return out
}

// recoverTries and recoverPause bound recoverOn's declaring again of a
// queue whose binding found its exchange or queue gone under it.
const (
	recoverTries = 3
	recoverPause = 100 * time.Millisecond
)

// needs reports whether a binding of queue in bs is to exchange.
func needs(bs []topology.Binding, queue, exchange string) bool {
	return slices.ContainsFunc(bs, func(b topology.Binding) bool { return b.Queue == queue && b.Exchange == exchange })
}

// recoverOn declares again, on c, a new connection not yet handed to
// anyone, what the broker forgot with the last one and a running consumer
// may still need (remembered.lost). Each
// item is declared on its own, a queue with its bindings before it is
// reported: a refusal (an exclusive queue the broker still holds for the
// dead connection: RESOURCE_LOCKED) costs that item and the rest of that
// queue's bindings, never the rest, and is logged as
// EventTopologyRedeclareFailed; the consumer of such a queue finds it
// missing later and declares it then (redeclareMissing). It is bounded by
// the dial timeout.
func (b *Broker) recoverOn(c *conn) {
	if b.cfg.NoRedeclare {
		return
	}
	d := b.reg.lost(b.running())
	if d.empty() {
		return
	}
	ctx, cancel := context.WithTimeout(b.life, b.cfg.DialTimeout)
	defer cancel()
	var ch *amqp.Channel
	defer func() {
		if ch != nil {
			b.closeLater(ch)
		}
	}()
	// one declares one item on a channel of c, opening one first if the
	// last refusal closed it; false once c itself is unusable.
	one := func(item declaration) (bool, error) {
		if ch == nil || ch.IsClosed() {
			if ch != nil {
				b.closeLater(ch)
				ch = nil
			}
			err := b.bounded(ctx, func() (err error) {
				ch, err = c.c.Channel()
				return err
			}, func() {
				if ch != nil {
					_ = ch.Close()
				}
			})
			if err != nil {
				ch = nil
				return false, err
			}
		}
		var op string
		err := b.bounded(ctx, func() (err error) {
			op, err = item.on(ch)
			return err
		}, nil)
		if err == nil {
			return true, nil
		}
		if ctx.Err() != nil || !channelLevel(err) {
			return false, brokerError(op, err)
		}
		return true, brokerError(op, err)
	}
	report := func(err error) {
		b.log.Warn(EventTopologyRedeclareFailed, "why", "reconnect", "error", err)
		b.hooks.emit(ctx, Event{Name: EventTopologyRedeclareFailed, Err: err})
	}
	for _, e := range d.exchanges {
		if goOn, err := one(declaration{exchanges: []topology.Exchange{e}}); err != nil {
			report(err)
			if !goOn {
				return
			}
		}
	}
	// Each queue with its bindings, then reported: once the record is
	// written, what is published to its exchanges reaches it.
	//
	// The broker may let the dead connection go only now: its auto-delete
	// queue, just declared (a no-op on the old one), then goes with its
	// last consumer, and an auto-delete exchange with its last binding, so
	// a binding finds its exchange or queue gone (NOT_FOUND). Then the
	// queue is declared again with the exchanges its bindings need, up to
	// recoverTries times, recoverPause apart.
	done := map[string]bool{}
	for _, q := range d.queues {
		var goOn bool
		var err error
		for try := 0; try < recoverTries; try++ {
			if try > 0 {
				if !sleep(ctx, recoverPause) {
					break
				}
				err = nil
				for i := 0; err == nil && i < len(d.exchanges); i++ {
					if needs(d.bindings, q.Name, d.exchanges[i].Name) {
						goOn, err = one(declaration{exchanges: []topology.Exchange{d.exchanges[i]}})
					}
				}
				if err != nil {
					break
				}
			}
			goOn, err = one(declaration{queues: []topology.Queue{q}})
			for i := 0; err == nil && i < len(d.bindings); i++ {
				if bd := d.bindings[i]; bd.Queue == q.Name {
					goOn, err = one(declaration{bindings: []topology.Binding{bd}})
				}
			}
			if err == nil || !goOn || !errors.Is(err, ErrNotFound) {
				break
			}
		}
		done[q.Name] = true
		if err != nil {
			report(err)
			if !goOn {
				return
			}
			continue
		}
		b.log.Info(EventTopologyRedeclared, "queue", q.Name, "why", "reconnect")
		b.hooks.emit(ctx, Event{Name: EventTopologyRedeclared, Queue: q.Name})
	}
	for _, bd := range d.bindings { // of durable queues to a forgotten exchange
		if done[bd.Queue] {
			continue
		}
		if goOn, err := one(declaration{bindings: []topology.Binding{bd}}); err != nil {
			report(err)
			if !goOn {
				return
			}
		}
	}
}

// redeclareMissing is called with the error of a subscribe to queue. If
// that error is NOT_FOUND and the service declared queue through this
// Broker, it declares the queue again with its bindings and its failure
// half (remembered.group), reports EventTopologyRedeclared, and returns
// true: subscribe again. A queue never declared here, Config.NoRedeclare,
// any other error, or a declaration that fails (reported as
// EventTopologyRedeclareFailed) return false: the subscribe's error
// stands.
func (b *Broker) redeclareMissing(ctx context.Context, queue string, err error) bool {
	if b.cfg.NoRedeclare || !errors.Is(err, ErrNotFound) || ctx.Err() != nil {
		return false
	}
	d, ok := b.reg.group(queue)
	if !ok {
		return false
	}
	if derr := b.onChannel(ctx, fmt.Sprintf("declare queue %q again", queue), d.on); derr != nil {
		b.log.Warn(EventTopologyRedeclareFailed, "queue", queue, "why", "missing", "error", derr)
		b.hooks.emit(ctx, Event{Name: EventTopologyRedeclareFailed, Queue: queue, Err: derr})
		return false
	}
	b.log.Warn(EventTopologyRedeclared, "queue", queue, "why", "missing", "declared", d.queueNames())
	b.hooks.emit(ctx, Event{Name: EventTopologyRedeclared, Queue: queue, Err: err})
	return true
}
