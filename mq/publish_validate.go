package mq

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"
)

// The limits of the validator: what an AMQP 0-9-1 frame can carry and what
// amqp091-go v1.16.0's frame reader accepts (read.go: maxFieldDepth,
// maxContainerElements). A value past one of them would fail the frame and
// close the whole connection — the writer's, or every consumer's that
// receives it — so the validator refuses it at the call, the connection
// untouched.
const (
	// maxShortString is the longest AMQP short string, in bytes: exchange
	// and queue names, routing keys, consumer tags, every string property
	// of a message (message id, correlation id, reply-to, expiration, type,
	// user id, app id, content type and encoding) and every header key.
	maxShortString = 255
	// maxHeaderDepth is how deeply tables and arrays may nest inside a
	// message's headers (or a declaration's arguments): a table directly in
	// the headers is at depth 1. amqp091-go's reader refuses deeper ones.
	maxHeaderDepth = 32
	// maxTableEntries is the most entries one table, and the most elements
	// one array, may hold anywhere in the headers. amqp091-go's reader
	// refuses bigger ones.
	maxTableEntries = 8192
	// maxExpiration is the largest per-message TTL RabbitMQ takes, in ms.
	maxExpiration = math.MaxUint32
)

// frameOverhead is what a frame adds to its payload: type, channel, size,
// frame-end. A frame, overhead included, must fit the negotiated frame_max.
const frameOverhead = 1 + 2 + 4 + 1

// defaultFrameMax is the frame_max amqp091-go asks for (and RabbitMQ
// grants by default), used before any connection was negotiated.
const defaultFrameMax = 128 * 1024

// invalidError is a value the validator refused: which field and which
// limit. errors.Is(err, [ErrInvalid]) matches it.
type invalidError struct {
	// Field names the value: "routing key", "message id",
	// `header "x-tags"[3]`, "queue name", …
	Field string
	// Problem says what is wrong, with the limit: "is 300 bytes, at most
	// 255".
	Problem string
}

func (e *invalidError) Error() string {
	return "mq: invalid " + e.Field + ": " + e.Problem
}

// Is matches [ErrInvalid].
func (e *invalidError) Is(target error) bool { return target == ErrInvalid }

func invalid(field, format string, args ...any) *invalidError {
	return &invalidError{Field: field, Problem: fmt.Sprintf(format, args...)}
}

// checkName checks a short string the library is about to send (a queue or
// exchange name, a routing key, a consumer tag): at most 255 (maxShortString)
// bytes. field names it in the error, which matches [ErrInvalid]. Every call
// of this package that sends a name runs it; tools that use a raw channel
// (package ops) run it too.
func checkName(field, s string) error {
	if len(s) > maxShortString {
		return invalid(field, "is %d bytes, at most %d", len(s), maxShortString)
	}
	return nil
}

// checkedPublish is a publish the validator passed: its properties, with
// headers written without loss, and the size of its content header frame.
type checkedPublish struct {
	pub        amqp.Publishing
	headerSize int // payload of the content header frame, in bytes
}

// checkPublish validates everything of one publish that reaches the wire
// before the body: exchange, routing key, the string properties, the
// expiration, the headers. It returns pub with its headers normalised
// (a Go int that an AMQP long-int (32 bits) does not hold is written as a
// long-long (64 bits) instead of being truncated; the caller's table is
// never modified) and the size of the header frame, which the caller
// compares with the connection's frame_max (fitsFrame).
func checkPublish(exchange, key string, pub amqp.Publishing) (checkedPublish, error) {
	if err := checkName("exchange name", exchange); err != nil {
		return checkedPublish{}, err
	}
	if err := checkName("routing key", key); err != nil {
		return checkedPublish{}, err
	}
	size := 2 + 2 + 8 + 2 // class, weight, body size, property flags
	for _, p := range [...]struct {
		field, v string
	}{
		{"content type", pub.ContentType},
		{"content encoding", pub.ContentEncoding},
		{"correlation id", pub.CorrelationId},
		{"reply-to", pub.ReplyTo},
		{"expiration", pub.Expiration},
		{"message id", pub.MessageId},
		{"type", pub.Type},
		{"user id", pub.UserId},
		{"app id", pub.AppId},
	} {
		if p.v == "" {
			continue
		}
		if err := checkName(p.field, p.v); err != nil {
			return checkedPublish{}, err
		}
		size += 1 + len(p.v)
	}
	if err := checkExpiration(pub.Expiration); err != nil {
		return checkedPublish{}, err
	}
	if pub.DeliveryMode > 0 {
		size++
	}
	if pub.Priority > 0 {
		size++
	}
	if !pub.Timestamp.IsZero() {
		size += 8
	}
	if len(pub.Headers) > 0 {
		h, n, _, err := normalizeTable(fieldPath{root: "header"}, pub.Headers, 0)
		if err != nil {
			return checkedPublish{}, err
		}
		pub.Headers = h
		size += n
	}
	return checkedPublish{pub: pub, headerSize: size}, nil
}

// checkExpiration refuses what RabbitMQ would answer with a channel error
// (406), killing the publisher's channel and every publish in flight on it:
// an expiration that is not a whole number of milliseconds in
// [0, 4294967295].
func checkExpiration(s string) error {
	if s == "" {
		return nil
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return invalid("expiration", "%q is not a whole number of milliseconds", s)
		}
	}
	if n, err := strconv.ParseUint(s, 10, 64); err != nil || n > maxExpiration {
		return invalid("expiration", "%q is over %d ms", s, uint64(maxExpiration))
	}
	return nil
}

// fitsFrame checks a validated publish against the connection's frame_max:
// its content header frame must fit one frame.
func (c checkedPublish) fitsFrame(frameMax int) error {
	if frameMax <= 0 {
		return nil
	}
	if limit := frameMax - frameOverhead; c.headerSize > limit {
		return invalid("message properties", "the headers and properties take %d bytes, more than the %d a frame carries (frame_max %d)",
			c.headerSize, limit, frameMax)
	}
	return nil
}

// checkTable validates a table the library is about to send (a message's
// headers, a declaration's arguments) the way checkPublish validates
// headers: keys of at most 255 (maxShortString) bytes, values of types AMQP can
// carry, nesting within maxHeaderDepth (32), sizes within maxTableEntries (8192), no
// Go int that would be truncated. field names it in the error, which
// matches [ErrInvalid].
func checkTable(field string, t amqp.Table) error {
	_, _, _, err := normalizeTable(fieldPath{root: field}, t, 0)
	return err
}

// normalizeTable validates t (at nesting depth depth) and returns it ready
// to write — t itself when nothing needed changing, a copy otherwise (and
// changed true) — and its encoded size (length prefix included).
func normalizeTable(path fieldPath, t amqp.Table, depth int) (_ amqp.Table, size int, changed bool, _ error) {
	if len(t) > maxTableEntries {
		return nil, 0, false, invalid(path.String(), "has %d entries, at most %d", len(t), maxTableEntries)
	}
	size = 4
	var out amqp.Table
	for k, v := range t {
		if len(k) > maxShortString {
			return nil, 0, false, invalid(path.String()+" key "+strconv.Quote(truncateKey(k)), "is %d bytes, at most %d", len(k), maxShortString)
		}
		nv, n, ch, err := normalizeField(path.to(pathStep{key: k}), v, depth)
		if err != nil {
			return nil, 0, false, err
		}
		if ch && out == nil {
			out = make(amqp.Table, len(t))
			for k2, v2 := range t {
				out[k2] = v2
			}
		}
		if out != nil {
			out[k] = nv
		}
		size += 1 + len(k) + n
	}
	if out == nil {
		return t, size, false, nil
	}
	return out, size, true, nil
}

// normalizeField validates one value and returns it as it will be written,
// its encoded size (type octet included) and whether it differs from v.
func normalizeField(path fieldPath, v any, depth int) (any, int, bool, error) {
	switch x := v.(type) {
	case nil:
		return v, 1, false, nil
	case bool, byte, int8:
		return v, 2, false, nil
	case int16, uint16:
		return v, 3, false, nil
	case int32, uint32, float32:
		return v, 5, false, nil
	case int:
		// amqp091-go writes a Go int as a 32-bit long-int, cutting off the
		// high bits: write what does not fit as a long-long.
		if x < math.MinInt32 || x > math.MaxInt32 {
			return int64(x), 9, true, nil
		}
		return v, 5, false, nil
	case int64, float64, time.Time:
		return v, 9, false, nil
	case amqp.Decimal:
		return v, 6, false, nil
	case string:
		return v, 5 + len(x), false, nil
	case []byte:
		return v, 5 + len(x), false, nil
	case amqp.Table:
		if depth+1 > maxHeaderDepth {
			return nil, 0, false, invalid(path.String(), "nests tables and arrays %d deep, at most %d", depth+1, maxHeaderDepth)
		}
		t, n, changed, err := normalizeTable(path, x, depth+1)
		if err != nil {
			return nil, 0, false, err
		}
		return t, 1 + n, changed, nil
	case []any:
		if depth+1 > maxHeaderDepth {
			return nil, 0, false, invalid(path.String(), "nests tables and arrays %d deep, at most %d", depth+1, maxHeaderDepth)
		}
		if len(x) > maxTableEntries {
			return nil, 0, false, invalid(path.String(), "has %d elements, at most %d", len(x), maxTableEntries)
		}
		size := 5
		var out []any
		for i, e := range x {
			ne, n, changed, err := normalizeField(path.to(pathStep{index: i, element: true}), e, depth+1)
			if err != nil {
				return nil, 0, false, err
			}
			if changed && out == nil {
				out = append([]any(nil), x...)
			}
			if out != nil {
				out[i] = ne
			}
			size += n
		}
		if out == nil {
			return v, size, false, nil
		}
		return out, size, true, nil
	}
	return nil, 0, false, invalid(path.String(), "is a %T, which AMQP cannot carry (use bool, the sized integers, int, float32/64, string, []byte, time.Time, amqp.Decimal, amqp.Table or []any)", v)
}

// fieldPath names a value inside a table being validated, for the error
// that refuses it: the table's name, then the keys and indexes on the way,
// up to three levels deep, then "…". It is kept by value and spelled out
// only when a value is refused, so a valid publish builds no names.
type fieldPath struct {
	root  string
	steps [3]pathStep
	n     int  // steps kept
	deep  bool // a step past the third
}

// pathStep is a table entry's key, or an array element's index.
type pathStep struct {
	key     string
	index   int
	element bool
}

// to is the path one step further in.
func (p fieldPath) to(s pathStep) fieldPath {
	if p.n < len(p.steps) {
		p.steps[p.n] = s
		p.n++
	} else {
		p.deep = true
	}
	return p
}

func (p fieldPath) String() string {
	var b strings.Builder
	b.WriteString(p.root)
	for _, s := range p.steps[:p.n] {
		if s.element {
			fmt.Fprintf(&b, "[%d]", s.index)
		} else {
			b.WriteString(" " + strconv.Quote(truncateKey(s.key)))
		}
	}
	if p.deep {
		b.WriteString(" …")
	}
	return b.String()
}

func truncateKey(k string) string {
	if len(k) <= 40 {
		return k
	}
	n := 40
	for n > 0 && !utf8.RuneStart(k[n]) {
		n--
	}
	return k[:n] + "…"
}

// Headers a hop may give up to fit a frame: optional extensions of this
// library that other languages need not read (contract §7).
var optionalHopHeaders = []string{
	HeaderHopTraceparent,
	HeaderOriginalExchange,
	HeaderOriginalRoutingKey,
	HeaderReplayedAt,
	HeaderReplayedFrom,
}

// minHopErrorText is the shortest x-acemq-error a hop cuts to before it
// gives up optional headers.
const minHopErrorText = 64

// fitHop makes a hop's publish fit frame_max by trimming only what the
// library added: first a shorter x-acemq-error (down to minHopErrorText
// bytes), then the optional x-acemq-* extension headers. It returns the
// publish that fits, or an error matching ErrInvalid when even that does
// not (the message as delivered was already at the limit): the hop cannot
// be made, and the middleware returns the original to its queue.
func fitHop(exchange, key string, c checkedPublish, frameMax int) (checkedPublish, error) {
	first := c.fitsFrame(frameMax)
	if first == nil {
		return c, nil
	}
	pub := c.pub
	h := make(amqp.Table, len(pub.Headers))
	for k, v := range pub.Headers {
		h[k] = v
	}
	pub.Headers = h
	try := func() (checkedPublish, bool) {
		nc, err := checkPublish(exchange, key, pub)
		if err != nil {
			return checkedPublish{}, false
		}
		return nc, nc.fitsFrame(frameMax) == nil
	}
	if s, ok := h[HeaderError].(string); ok && len(s) > minHopErrorText {
		over := c.headerSize - (frameMax - frameOverhead)
		n := max(minHopErrorText, len(s)-over-len("…"))
		for n > 0 && !utf8.RuneStart(s[n]) {
			n--
		}
		h[HeaderError] = s[:n] + "…"
		if nc, ok := try(); ok {
			return nc, nil
		}
	}
	for _, k := range optionalHopHeaders {
		if _, ok := h[k]; !ok {
			continue
		}
		delete(h, k)
		if nc, ok := try(); ok {
			return nc, nil
		}
	}
	return checkedPublish{}, fmt.Errorf("mq: the hop cannot carry the message even with its own headers trimmed: %w", first)
}

// CheckPublish runs on m, published to exchange with key, the checks
// [Publisher.Publish] runs before anything reaches the wire (with the frame
// size amqp091-go asks for), and fails as Publish does: the same error,
// matching [ErrInvalid]. A fake publisher (mqtest.Publisher) answers with it.
func CheckPublish(exchange, key string, m Message) error {
	cp, err := checkPublish(exchange, key, m.publishing())
	if err == nil {
		err = cp.fitsFrame(defaultFrameMax)
	}
	if err != nil {
		p := Publisher{exchange: exchange}
		return fmt.Errorf("mq: publish to %s: %w", p.dest(key), err)
	}
	return nil
}
