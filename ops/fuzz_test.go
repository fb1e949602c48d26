package ops

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/topology"
)

// headerValue turns fuzz input into one header value of the kind another
// language (or a broken tool) might have written.
func headerValue(kind uint8, s string, n int64, f float64) any {
	switch kind % 12 {
	case 0:
		return s
	case 1:
		return []byte(s)
	case 2:
		return n
	case 3:
		return int32(n)
	case 4:
		return int8(n)
	case 5:
		return f
	case 6:
		return float32(f)
	case 7:
		return amqp.Table{"nested": s, "n": n}
	case 8:
		return []any{s, n, f}
	case 9:
		return nil
	case 10:
		return time.Unix(n%(1<<40), 0)
	default:
		return strings.Repeat(s, 1+int(uint64(n)%300))
	}
}

// FuzzDeadLetterDecoding feeds replay's header decoding dead letters as
// malformed as anything on the wire can make them: it must never panic, and
// a target it accepts must be a queue it could publish to.
func FuzzDeadLetterDecoding(f *testing.F) {
	f.Add("orders.dlq", uint8(0), "orders", int64(3), 2.5, uint8(2), uint8(5))
	f.Add("orders.parked", uint8(1), "billing", int64(-1), math.NaN(), uint8(0), uint8(7))
	f.Add("holding", uint8(9), "", int64(1<<40), math.Inf(1), uint8(11), uint8(8))
	f.Add(".dlq", uint8(11), "x", int64(7), 1e300, uint8(1), uint8(10))
	f.Fuzz(func(t *testing.T, from string, srcKind uint8, s string, n int64, fl float64, attemptKind, timeKind uint8) {
		h := amqp.Table{
			mq.HeaderSourceQueue: headerValue(srcKind, s, n, fl),
			mq.HeaderAttempt:     headerValue(attemptKind, s, n, fl),
			mq.HeaderFailedAt:    headerValue(timeKind, s, n, fl),
			mq.HeaderReason:      headerValue(srcKind+attemptKind, s, n, fl),
			mq.HeaderError:       headerValue(timeKind+1, s, n, fl),
		}
		target, _, err := source(h, from)
		if err != nil {
			if !errors.Is(err, ErrNoSource) {
				t.Fatalf("source(%v, %q): unexpected error kind %v", h, from, err)
			}
		} else {
			if target == "" || len(target) > topology.MaxNameLength || target == from {
				t.Fatalf("source(%v, %q) = %q: not a queue replay may publish to", h, from, target)
			}
		}
		p := peeked(from, 1, amqp.Delivery{Headers: h, Body: []byte(s)})
		if p.Attempt < 1 {
			t.Fatalf("peeked attempt %d < 1", p.Attempt)
		}
		if len(p.Preview) > 4*PreviewBytes+len("…") {
			t.Fatalf("preview of %d bytes is longer than the cap", len(p.Preview))
		}
	})
}
