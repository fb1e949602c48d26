package ops

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/mq"
)

// browse shows up to limit messages from the head of queue to visit, in
// order, without taking them, like Peek but streamed: it subscribes with a
// prefetch of limit and without acknowledging, so the broker pushes them
// without a round trip each, and gives every one back at the end, to where
// it was (marked redelivered; see holding). It stops early
// when visit returns false, when ctx ends, or when no message came for
// idle. It reports how many messages the queue held when it started.
func browse(ctx context.Context, b *mq.Broker, queue string, limit int, idle time.Duration, visit func(pos int, d amqp.Delivery) bool) (int, error) {
	info, err := inspect(ctx, b, queue)
	if err != nil {
		return 0, err
	}
	n := min(info.Messages, limit, maxPrefetch)
	if n <= 0 {
		return info.Messages, nil
	}
	ch, err := b.Channel(ctx)
	if err != nil {
		return info.Messages, fmt.Errorf("ops: browse %q: %w", queue, err)
	}
	h := &holding{ctx: ctx, ch: ch}
	defer h.close() // returns every message delivered, in place
	// The prefetch is the channel's (global), which is the same for the
	// one consumer the channel has, and which a quorum queue or a stream
	// refuses at basic.consume, before it delivers anything: the look
	// learns the queue's type without reading a message.
	if err := call(ctx, func() error { return ch.Qos(n, 0, true) }); err != nil {
		return info.Messages, fmt.Errorf("ops: browse %q: %w", queue, refusal("qos", err))
	}
	var ds <-chan amqp.Delivery
	err = call(ctx, func() (err error) {
		ds, err = ch.Consume(queue, browseTag, false, false, false, false, nil)
		return err
	})
	if err != nil {
		var ae *amqp.Error
		if errors.As(err, &ae) && ae.Code == amqp.NotImplemented {
			return info.Messages, fmt.Errorf("ops: browse %q: %w (%s)", queue, errNotClassic, ae.Reason)
		}
		return info.Messages, fmt.Errorf("ops: browse %q: %w", queue, refusal(fmt.Sprintf("consume from queue %q", queue), err))
	}
	// Stopped early, the look leaves deliveries it never read on the
	// channel: cancel, then read them to the end (amqp091 ends the stream
	// after the cancel-ok), so they are given back with the rest.
	defer func() {
		if call(ctx, func() error { return ch.Cancel(browseTag, false) }) != nil {
			return // the channel is gone (or going): the broker returns them itself
		}
		t := time.NewTimer(time.Second)
		defer t.Stop()
		for {
			select {
			case d, ok := <-ds:
				if !ok {
					return
				}
				h.keep(d.DeliveryTag)
			case <-t.C:
				return
			}
		}
	}()
	timer := time.NewTimer(idle)
	defer timer.Stop()
	for pos := 1; pos <= n; pos++ {
		var d amqp.Delivery
		var ok bool
		select {
		case d, ok = <-ds:
		case <-ctx.Done():
			return info.Messages, fmt.Errorf("ops: browse %q: %w", queue, ctx.Err())
		case <-timer.C:
			return info.Messages, nil // taken by someone else meanwhile
		}
		if !ok {
			return info.Messages, fmt.Errorf("ops: browse %q: the channel closed after %d messages", queue, pos-1)
		}
		h.keep(d.DeliveryTag)
		if !visit(pos, d) {
			break
		}
		timer.Reset(idle)
	}
	return info.Messages, nil
}

// errNotClassic is browse's error for a queue that refused a consumer on
// a channel with a global prefetch: a quorum queue or a stream, which
// counts (or cannot return) what a look takes. Nothing was read.
var errNotClassic = errors.New("not a classic queue")

// browseTag is browse's consumer tag, on a channel of its own.
const browseTag = "acemq-browse"

// maxPrefetch is the largest prefetch count AMQP 0-9-1 can say.
const maxPrefetch = 65535

// failure is one dead letter or parked message as the console shows it.
type failure struct {
	Peeked
	// Key names the message among its queue's (see messageKey), filled in
	// for the messages a page lists; Group is the group it falls in.
	Key, Group string
	// TraceID is the trace id of the traceparent header, if any.
	TraceID string
}

func newFailure(queue string, pos int, d amqp.Delivery, norm *normaliser) failure {
	// The body's preview is made only for the messages a page lists (see
	// scanner.add): on 10 000 messages it is a third of the work.
	body := d.Body
	d.Body = nil
	f := failure{Peeked: peeked(queue, pos, d)}
	f.Body = body
	f.Group = norm.group(f.Peeked) // Key is filled in only where shown (see scanner.add)
	if tp, ok := headerString(d.Headers, "traceparent"); ok && len(tp) >= 55 && tp[2] == '-' && tp[35] == '-' {
		f.TraceID = tp[3:35] // version-traceid-spanid-flags
	}
	return f
}

// messageKey names a message by what it carries: id, timestamp, the
// failure headers and the body. Two messages with the same key look alike
// in every way the console shows; an action on a key acts on the first.
func messageKey(p Peeked) string {
	h := sha256.New()
	for _, s := range []string{p.MessageId, p.Timestamp.UTC().Format(time.RFC3339Nano), p.FailedAt.UTC().Format(time.RFC3339Nano), p.Reason, p.Error, p.SourceQueue} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	h.Write(p.Body)
	return hex.EncodeToString(h.Sum(nil)[:10])
}

// normaliseError turns an error text into its group's text: UUIDs, hex
// ids and numbers (with decimals, times, addresses and ports) each become
// one placeholder, so "order 17 not found" and "order 4711 not found" fall
// in one group. A hex id is a word of 6 or more hex digits that mixes
// digits and the letters a–f, or a 0x number, so words like "cafe" or
// "deadbeef" stay. Digits inside a word fold too ("v3" → "v<n>"). One pass,
// no regular expressions: a queue of 10 000 distinct texts is grouped well
// within a page's time.
func normaliseError(s string) string {
	var sb strings.Builder
	sb.Grow(len(s))
	for i := 0; i < len(s); {
		if isWordByte(s[i]) && (i == 0 || !isWordByte(s[i-1])) {
			j := i
			for j < len(s) && isWordByte(s[j]) {
				j++
			}
			if end := uuidAt(s, i); end > 0 {
				sb.WriteString("<uuid>")
				i = end
				continue
			}
			if hexWord(s[i:j]) {
				sb.WriteString("<hex>")
				i = j
				continue
			}
		}
		if isDigit(s[i]) {
			j := i
			for j < len(s) && isDigit(s[j]) {
				j++
			}
			for j+1 < len(s) && (s[j] == '.' || s[j] == ':') && isDigit(s[j+1]) {
				j++
				for j < len(s) && isDigit(s[j]) {
					j++
				}
			}
			sb.WriteString("<n>")
			i = j
			continue
		}
		sb.WriteByte(s[i])
		i++
	}
	return sb.String()
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func isHex(c byte) bool { return isDigit(c) || ('a' <= c && c <= 'f') || ('A' <= c && c <= 'F') }

func isWordByte(c byte) bool {
	return isDigit(c) || ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z') || c == '_'
}

// uuidAt returns the end of the UUID that starts at s[i], or 0.
func uuidAt(s string, i int) int {
	const shape = "hhhhhhhh-hhhh-hhhh-hhhh-hhhhhhhhhhhh"
	if len(s)-i < len(shape) {
		return 0
	}
	for k := 0; k < len(shape); k++ {
		c := s[i+k]
		if (shape[k] == '-' && c != '-') || (shape[k] == 'h' && !isHex(c)) {
			return 0
		}
	}
	end := i + len(shape)
	if end < len(s) && isWordByte(s[end]) {
		return 0
	}
	return end
}

// hexWord reports a word that is a hex id (see normaliseError).
func hexWord(w string) bool {
	if len(w) > 2 && w[0] == '0' && (w[1] == 'x' || w[1] == 'X') {
		for k := 2; k < len(w); k++ {
			if !isHex(w[k]) {
				return false
			}
		}
		return true
	}
	if len(w) < 6 {
		return false
	}
	var digit, letter bool
	for k := 0; k < len(w); k++ {
		c := w[k]
		switch {
		case isDigit(c):
			digit = true
		case isHex(c):
			letter = true
		default:
			return false
		}
	}
	return digit && letter
}

// normaliser memoises a scan's groups: a queue's errors are few distinct
// texts many times over.
type normaliser struct {
	texts  map[string]string   // error text → normalised
	groups map[groupRaw]string // reason, error, source → group id
}

type groupRaw struct{ reason, err, source string }

// memoLimit caps each memo, so a queue of all-distinct texts does not
// grow it without bound.
const memoLimit = 20000

func (n *normaliser) text(s string) string {
	if v, ok := n.texts[s]; ok {
		return v
	}
	v := normaliseError(s)
	if n.texts == nil {
		n.texts = map[string]string{}
	}
	if len(n.texts) < memoLimit {
		n.texts[s] = v
	}
	return v
}

// group is the id of p's group: reason, normalised error, source queue.
func (n *normaliser) group(p Peeked) string {
	raw := groupRaw{p.Reason, p.Error, p.SourceQueue}
	if id, ok := n.groups[raw]; ok {
		return id
	}
	h := sha256.New()
	for _, s := range []string{p.Reason, n.text(p.Error), p.SourceQueue} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	id := hex.EncodeToString(h.Sum(nil)[:6])
	if n.groups == nil {
		n.groups = map[groupRaw]string{}
	}
	if len(n.groups) < memoLimit {
		n.groups[raw] = id
	}
	return id
}

// failureGroup is the failures of one group in a scan.
type failureGroup struct {
	ID, Reason, Error, Sample, Source string
	Count                             int
	First, Last                       time.Time
}

// scan is what the console saw of one .dlq or .parked queue.
type scan struct {
	Queue string
	At    time.Time // when the messages were read
	// Quorum is set when the queue is not one a look may read: the
	// management API gave a type other than classic (nothing was read), or
	// a message carried a quorum queue's mark (see deliveryCounted) and the
	// look stopped there.
	Quorum  bool
	Held    int // messages in the queue when the scan started
	Scanned int
	Groups  []*failureGroup // by count, largest first
	// Page is the failures a filter picked, from Offset on, at most pageSize.
	Page   []failure
	Picked int // how many the filter picked in all
}

// maxGroupsShown caps the groups a queue's page lists (largest first).
const maxGroupsShown = 500

// Shown is the groups a queue's page lists; Hidden how many more there are.
func (s scan) Shown() []*failureGroup { return s.Groups[:min(len(s.Groups), maxGroupsShown)] }

// Hidden is how many groups Shown leaves out.
func (s scan) Hidden() int { return max(len(s.Groups)-maxGroupsShown, 0) }

// pageSize is how many messages a page lists.
const pageSize = 50

// scanner groups the messages of one scan as they come, and keeps them
// when keep is set (for the console's snapshot).
type scanner struct {
	s      scan
	norm   normaliser
	groups map[string]*failureGroup
	offset int
	pick   func(failure) bool
	stop   bool
	keep   bool
	kept   []failure
	bytes  int
}

func newScanner(queue string, offset int, pick func(failure) bool, stop bool) *scanner {
	return &scanner{s: scan{Queue: queue}, groups: map[string]*failureGroup{}, offset: offset, pick: pick, stop: stop}
}

// maxSnapshotBytes caps the bodies a snapshot keeps.
const maxSnapshotBytes = 64 << 20

func (sc *scanner) visit(pos int, d amqp.Delivery) bool {
	if deliveryCounted(d.Headers) {
		// A quorum queue: every look counts as a delivery toward its
		// delivery limit. Stop reading it (what was taken goes back).
		sc.s.Quorum = true
		return false
	}
	f := newFailure(sc.s.Queue, pos, d, &sc.norm)
	if sc.keep {
		if sc.bytes += len(f.Body); sc.bytes > maxSnapshotBytes {
			sc.keep, sc.kept = false, nil
		} else {
			sc.kept = append(sc.kept, f)
		}
	}
	return sc.add(f)
}

func (sc *scanner) add(f failure) bool {
	sc.s.Scanned++
	g := sc.groups[f.Group]
	if g == nil {
		g = &failureGroup{ID: f.Group, Reason: f.Reason, Error: sc.norm.text(f.Error), Sample: f.Error, Source: f.SourceQueue}
		sc.groups[f.Group] = g
	}
	g.Count++
	if !f.FailedAt.IsZero() {
		if g.First.IsZero() || f.FailedAt.Before(g.First) {
			g.First = f.FailedAt
		}
		if f.FailedAt.After(g.Last) {
			g.Last = f.FailedAt
		}
	}
	if sc.pick != nil && sc.pick(f) {
		sc.s.Picked++
		if sc.s.Picked > sc.offset && len(sc.s.Page) < pageSize {
			if f.Key == "" {
				f.Key = messageKey(f.Peeked)
			}
			f.Preview = Preview(f.Body, PreviewBytes)
			sc.s.Page = append(sc.s.Page, f)
		}
		if sc.stop {
			return false
		}
	}
	return true
}

func (sc *scanner) done(held int) scan {
	s := sc.s
	s.Held = held
	if s.At.IsZero() {
		s.At = time.Now()
	}
	for _, g := range sc.groups {
		s.Groups = append(s.Groups, g)
	}
	sort.Slice(s.Groups, func(i, j int) bool {
		if s.Groups[i].Count != s.Groups[j].Count {
			return s.Groups[i].Count > s.Groups[j].Count
		}
		return s.Groups[i].ID < s.Groups[j].ID
	})
	return s
}
