package ops

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/topology"
)

// DefaultPublishTimeout is ReplayOptions.PublishTimeout's default.
const DefaultPublishTimeout = 30 * time.Second

// ErrNoSource is matched (errors.Is) by the error of a message Replay left
// in place because it could not tell where the message goes back to.
var ErrNoSource = errors.New("ops: no source queue")

// ReplayOptions adjust a Replay. The zero value moves every message that
// is in the queue when the replay starts back to its own source queue.
type ReplayOptions struct {
	// To sends every message to this queue instead of its source queue. It
	// must exist and must not be the queue replayed from. Default: each
	// message's source queue (see the package documentation).
	To string
	// Limit takes at most this many messages from the queue, moved or
	// skipped. Default 0: as many as the queue held when the replay
	// started (messages that arrive during the replay — a consumer failing
	// replayed messages straight back, say — wait for the next run, so a
	// replay always ends).
	Limit int
	// DryRun takes the messages without moving them and reports where each
	// would go. They are all returned to the queue, in place, when Replay
	// returns (marked redelivered). Default false.
	DryRun bool
	// Progress, when set, is called on Replay's goroutine after each message
	// taken, with how many have been taken and how many the replay will
	// take at most. Default: none.
	Progress func(done, total int)
	// PublishTimeout bounds the move of one message once it was taken: its
	// republish and confirm go on when ctx is cancelled (so an interrupt
	// does not leave a message moved but not acknowledged), but no longer
	// than this. Default DefaultPublishTimeout (30 s).
	PublishTimeout time.Duration
	// Logger receives a record for each message whose x-acemq-source-queue
	// header could not be used. Default: the broker's logger.
	Logger *slog.Logger
	// Filter moves only the messages it matches; the others stay where
	// they are (see ReplayResult.Unmatched). With a filter, every message
	// the queue held at the start is looked at, and Limit caps the
	// messages moved or skipped. Default: every message.
	Filter Filter
}

// ReplayResult is what a Replay did, also when it stopped with an error.
type ReplayResult struct {
	// From is the queue replayed from.
	From string
	// DryRun is true when nothing was moved (ReplayOptions.DryRun).
	DryRun bool
	// Total is how many messages the replay set out to take: the ready
	// messages in From when it started, capped by Limit when there is no
	// Filter (with one, Limit caps what is moved or skipped instead).
	Total int
	// Taken is how many messages it took from From (Moved + len(Skipped),
	// plus a message whose move failed).
	Taken int
	// Moved is how many messages were moved; in a dry run, how many would
	// have been.
	Moved int
	// Targets counts the moved messages by the queue they went (or would go)
	// to.
	Targets map[string]int
	// Skipped are the messages left in From because their destination could
	// not be worked out; each Err matches ErrNoSource.
	Skipped []Skipped
	// Unmatched counts the messages the Filter left in place.
	Unmatched int
	// Duplicates is a lower bound: at least this many messages were
	// republished whose original could not be acknowledged afterwards (the
	// connection went in between): they are now in their target and back in
	// From, and a later replay moves them a second time. It cannot be exact:
	// an ack the client wrote can still die with the connection before the
	// broker read it, and a republish resent after a lost connection may
	// land twice; neither is seen by the client. Show it as "at least N".
	Duplicates int
}

// Skipped is a message Replay left where it was.
type Skipped struct {
	MessageId string
	Err       error
}

// Replay moves messages from a dead-letter or parked queue (from, usually
// <q>.dlq or <q>.parked) back to the queue they failed on, one at a time,
// acknowledging each only after its republish was confirmed: see the
// package documentation for the rules. It returns what it did; the error
// says why it stopped early (ctx ended, a publish failed: mq.ErrUnroutable
// when the target queue does not exist, the connection was lost), and
// errors.Is(err, mq.ErrNotFound) when from (or To) does not exist.
// Messages it could not place are not an error: see ReplayResult.Skipped.
func Replay(ctx context.Context, b *mq.Broker, from string, opts ReplayOptions) (ReplayResult, error) {
	res := ReplayResult{From: from, DryRun: opts.DryRun, Targets: map[string]int{}}
	switch {
	case from == "":
		return res, errors.New("ops: replay: the queue to replay from is empty")
	case opts.To == from:
		return res, fmt.Errorf("ops: replay: %q cannot be replayed into itself", from)
	case opts.Limit < 0:
		return res, fmt.Errorf("ops: replay: Limit is %d, must not be negative", opts.Limit)
	}
	if opts.PublishTimeout <= 0 {
		opts.PublishTimeout = DefaultPublishTimeout
	}
	log := opts.Logger
	if log == nil {
		log = b.Logger()
	}

	info, err := inspect(ctx, b, from)
	if err != nil {
		return res, fmt.Errorf("ops: replay: %w", err)
	}
	if opts.To != "" {
		if _, err := inspect(ctx, b, opts.To); err != nil {
			return res, fmt.Errorf("ops: replay: target: %w", err)
		}
	}
	res.Total = info.Messages
	if opts.Limit > 0 && opts.Limit < res.Total && opts.Filter.IsZero() {
		res.Total = opts.Limit
	}
	if res.Total == 0 {
		return res, nil
	}

	ch, err := b.Channel(ctx)
	if err != nil {
		return res, fmt.Errorf("ops: replay from %q: %w", from, err)
	}
	// What it still holds at the end (skipped messages, a dry run's) goes
	// back to the queue, in place.
	h := &holding{ctx: ctx, ch: ch}
	defer h.close()
	var pub *mq.Publisher
	if !opts.DryRun {
		pub = b.Publisher("", mq.AsHop(mq.OutcomeReplay))
		// Publisher.Close waits for the broker's answer: only while ctx
		// lasts, like the rest; past that it finishes on its own, with
		// the connection at the latest.
		defer waitOrLeave(ctx, pub.Close)
	}

	for res.Taken < res.Total {
		if opts.Limit > 0 && res.Moved+len(res.Skipped) >= opts.Limit {
			break // a filtered replay reached its limit
		}
		if err := ctx.Err(); err != nil {
			return res, fmt.Errorf("ops: replay from %q stopped after %d of %d messages: %w", from, res.Taken, res.Total, err)
		}
		d, ok, err := get(ctx, ch, from)
		if err != nil {
			return res, fmt.Errorf("ops: replay from %q stopped after %d of %d messages: %w", from, res.Taken, res.Total, err)
		}
		if !ok {
			break // emptied faster than counted (another consumer)
		}
		res.Taken++
		if !opts.Filter.matches(from, d) {
			h.keep(d.DeliveryTag)
			res.Unmatched++ // held until the end, then back in place
			progress(opts, res)
			continue
		}
		target := opts.To
		if target == "" {
			var note string
			target, note, err = source(d.Headers, from)
			if note != "" {
				log.Warn("acemq.replay.source.header.ignored", "queue", from, "message_id", d.MessageId, "problem", note, "target", target)
			}
			if err != nil {
				// Held unacknowledged until the end, so the next get moves
				// on; then it returns to where it was.
				h.keep(d.DeliveryTag)
				res.Skipped = append(res.Skipped, Skipped{MessageId: d.MessageId, Err: err})
				log.Warn("acemq.replay.skipped", "queue", from, "message_id", d.MessageId, "error", err)
				progress(opts, res)
				continue
			}
		}
		if opts.DryRun {
			h.keep(d.DeliveryTag)
			res.Moved++
			res.Targets[target]++
			progress(opts, res)
			continue
		}
		if err := move(ctx, pub, d, from, target, opts.PublishTimeout); err != nil {
			if nerr := d.Nack(false, true); nerr != nil {
				// The channel is gone: the broker returned the message itself.
				log.Debug("acemq.replay.nack.skipped", "message_id", d.MessageId, "error", nerr)
			}
			return res, err
		}
		if err := d.Ack(false); err != nil {
			res.Duplicates++
			return res, fmt.Errorf("ops: replay from %q: message %q was republished to %q but its ack was lost (%v): it is back in %q too, and a later replay moves it a second time",
				from, d.MessageId, target, err, from)
		}
		res.Moved++
		res.Targets[target]++
		log.Debug("acemq.replay.moved", "queue", from, "message_id", d.MessageId, "target", target)
		progress(opts, res)
	}
	return res, nil
}

func progress(opts ReplayOptions, res ReplayResult) {
	if opts.Progress != nil {
		opts.Progress(res.Taken, res.Total)
	}
}

// failureRecord are the headers a replay removes (docs/contract.md,
// "Replay"): the attempt count, so the next delivery is attempt 1; the
// failure the message was set aside for, which the replay closes; and the
// last hop's trace context, which a traced replay writes afresh and an
// untraced one must not leave pointing at the dead letter's hop.
var failureRecord = []string{mq.HeaderAttempt, mq.HeaderSourceQueue, mq.HeaderReason, mq.HeaderError,
	mq.HeaderFailedAt, mq.HeaderHopTraceparent}

// move republishes d to target with the replay recorded, and returns once
// the broker confirmed it. Once a message is taken its move is finished even
// if ctx ends meanwhile, bounded by timeout.
func move(ctx context.Context, pub *mq.Publisher, d amqp.Delivery, from, target string, timeout time.Duration) error {
	m := mq.MessageOf(d)
	if m.Headers == nil {
		m.Headers = amqp.Table{}
	}
	for _, h := range failureRecord {
		delete(m.Headers, h)
	}
	m.Headers[mq.HeaderReplayedAt] = time.Now().UTC()
	m.Headers[mq.HeaderReplayedFrom] = from
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	err := pub.Publish(pctx, target, m)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, mq.ErrUnroutable):
		return fmt.Errorf("ops: replay from %q: queue %q does not exist (the republish of message %q came back unroutable); the message stays in %q: %w",
			from, target, d.MessageId, from, err)
	default:
		return fmt.Errorf("ops: replay from %q: republish of message %q to %q failed; the message stays in %q: %w",
			from, d.MessageId, target, from, err)
	}
}

// source works out the queue a message taken from `from` goes back to: its
// x-acemq-source-queue header (a string, or bytes holding UTF-8), or, when
// that is missing or unusable, from with its .dlq or .parked suffix
// stripped. note says why a header that was there could not be used.
func source(h amqp.Table, from string) (target, note string, err error) {
	if v, present := h[mq.HeaderSourceQueue]; present {
		s, ok := headerString(h, mq.HeaderSourceQueue)
		switch {
		case !ok:
			note = fmt.Sprintf("%s is a %T, not a string", mq.HeaderSourceQueue, v)
		case s == "":
			note = mq.HeaderSourceQueue + " is empty"
		case len(s) > topology.MaxNameLength:
			note = fmt.Sprintf("%s is longer than %d bytes", mq.HeaderSourceQueue, topology.MaxNameLength)
		case s == from:
			note = mq.HeaderSourceQueue + " names the queue being replayed from"
		default:
			return s, "", nil
		}
	}
	for _, suffix := range []string{topology.DeadLetterSuffix, topology.ParkedSuffix} {
		if base, ok := strings.CutSuffix(from, suffix); ok && base != "" {
			return base, note, nil
		}
	}
	why := "it has no " + mq.HeaderSourceQueue + " header"
	if note != "" {
		why = note
	}
	return "", note, fmt.Errorf("%w: %s, and %q does not end in %s or %s to fall back on (give a target queue)",
		ErrNoSource, why, from, topology.DeadLetterSuffix, topology.ParkedSuffix)
}
