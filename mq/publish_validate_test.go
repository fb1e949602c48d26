package mq

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// fuzzBytes turns fuzz input into choices.
type fuzzBytes struct{ b []byte }

func (f *fuzzBytes) byte() byte {
	if len(f.b) == 0 {
		return 0
	}
	c := f.b[0]
	f.b = f.b[1:]
	return c
}

// str is a string of 0–300 bytes, so the 255-byte limit is crossed now and
// then.
func (f *fuzzBytes) str() string {
	n := int(f.byte())
	if f.byte()%4 == 0 {
		n += int(f.byte()) % 46 // up to 300
	}
	return strings.Repeat(string(rune('a'+f.byte()%26)), n)
}

func (f *fuzzBytes) value(depth int) any {
	switch f.byte() % 20 {
	case 0:
		return f.str()
	case 1:
		return []byte(f.str())
	case 2:
		return int(int64(f.byte()) << (f.byte() % 56) * int64(1-2*int(f.byte()%2)))
	case 3:
		return int32(f.byte())
	case 4:
		return int64(f.byte()) << 40
	case 5:
		return float64(f.byte()) / 3
	case 6:
		return float32(f.byte())
	case 7:
		return nil
	case 8:
		return f.byte()%2 == 0
	case 9:
		return int8(f.byte())
	case 10:
		return int16(f.byte())
	case 11:
		return uint16(f.byte())
	case 12:
		return uint32(f.byte())
	case 13:
		return time.Unix(int64(f.byte())*1e6, 0)
	case 14:
		return amqp.Decimal{Scale: 2, Value: int32(f.byte())}
	case 15:
		return uint64(f.byte()) // not carried: refused
	case 16, 17:
		if depth > 40 {
			return "deep"
		}
		if f.byte()%8 == 0 { // a deep chain, around the depth limit
			n := 28 + int(f.byte()%8)
			var v any = "leaf"
			for range n {
				v = amqp.Table{"n": v}
			}
			return v
		}
		return f.table(depth + 1)
	case 18:
		if depth > 40 {
			return nil
		}
		n := int(f.byte() % 5)
		if f.byte() == 255 {
			n = maxTableEntries + int(f.byte()%2)
		}
		a := make([]any, n)
		for i := range a {
			if i < 5 {
				a[i] = f.value(depth + 1)
			}
		}
		return a
	default:
		return strings.Repeat("x", int(f.byte())*600) // up to 150 KB: over frame_max now and then
	}
}

func (f *fuzzBytes) table(depth int) amqp.Table {
	n := int(f.byte() % 6)
	t := amqp.Table{}
	if f.byte() == 255 {
		for i := range maxTableEntries + int(f.byte()%2) {
			t[string(rune(0x4e00+i))] = int32(i)
		}
		return t
	}
	for range n {
		t[f.str()] = f.value(depth)
	}
	return t
}

func fuzzMessage(data []byte) (string, Message) {
	f := &fuzzBytes{b: data}
	key := f.str()
	m := Message{Body: []byte(f.str())}
	for _, s := range []*string{&m.ContentType, &m.ContentEncoding, &m.CorrelationId, &m.ReplyTo, &m.MessageId, &m.Type, &m.UserId, &m.AppId} {
		if f.byte()%3 == 0 {
			*s = f.str()
		}
	}
	switch f.byte() % 4 {
	case 0:
		m.Expiration = "60000"
	case 1:
		m.Expiration = f.str()
	}
	m.Priority = f.byte() % 10
	if f.byte()%2 == 0 {
		m.Headers = f.table(0)
	}
	return key, m
}

// refEncode writes a field the way AMQP 0-9-1 (and amqp091-go) encodes it,
// written independently of the validator so its size accounting is
// checked; ok false for a value it cannot encode.
func refEncode(w *bytes.Buffer, v any) bool {
	switch x := v.(type) {
	case nil:
		w.WriteByte('V')
	case bool:
		w.Write([]byte{'t', 0})
	case byte:
		w.Write([]byte{'B', x})
	case int8:
		w.Write([]byte{'b', byte(x)})
	case int16:
		w.WriteByte('s')
		_ = binary.Write(w, binary.BigEndian, x)
	case uint16:
		w.WriteByte('u')
		_ = binary.Write(w, binary.BigEndian, x)
	case int32:
		w.WriteByte('I')
		_ = binary.Write(w, binary.BigEndian, x)
	case int:
		if x < math.MinInt32 || x > math.MaxInt32 {
			return false // must have been converted
		}
		w.WriteByte('I')
		_ = binary.Write(w, binary.BigEndian, int32(x))
	case uint32:
		w.WriteByte('i')
		_ = binary.Write(w, binary.BigEndian, x)
	case int64:
		w.WriteByte('l')
		_ = binary.Write(w, binary.BigEndian, x)
	case float32:
		w.WriteByte('f')
		_ = binary.Write(w, binary.BigEndian, x)
	case float64:
		w.WriteByte('d')
		_ = binary.Write(w, binary.BigEndian, x)
	case amqp.Decimal:
		w.Write([]byte{'D', x.Scale})
		_ = binary.Write(w, binary.BigEndian, x.Value)
	case time.Time:
		w.WriteByte('T')
		_ = binary.Write(w, binary.BigEndian, x.Unix())
	case string:
		w.WriteByte('S')
		_ = binary.Write(w, binary.BigEndian, uint32(len(x)))
		w.WriteString(x)
	case []byte:
		w.WriteByte('x')
		_ = binary.Write(w, binary.BigEndian, uint32(len(x)))
		w.Write(x)
	case []any:
		var inner bytes.Buffer
		for _, e := range x {
			if !refEncode(&inner, e) {
				return false
			}
		}
		w.WriteByte('A')
		_ = binary.Write(w, binary.BigEndian, uint32(inner.Len()))
		w.Write(inner.Bytes())
	case amqp.Table:
		w.WriteByte('F')
		return refTable(w, x)
	default:
		return false
	}
	return true
}

func refTable(w *bytes.Buffer, t amqp.Table) bool {
	var inner bytes.Buffer
	for k, v := range t {
		if len(k) > 255 {
			return false
		}
		inner.WriteByte(byte(len(k)))
		inner.WriteString(k)
		if !refEncode(&inner, v) {
			return false
		}
	}
	_ = binary.Write(w, binary.BigEndian, uint32(inner.Len()))
	w.Write(inner.Bytes())
	return true
}

// refLimits checks amqp091-go's reader limits on a normalised value.
func refLimits(v any, depth int) bool {
	switch x := v.(type) {
	case amqp.Table:
		if depth > maxHeaderDepth || len(x) > maxTableEntries {
			return false
		}
		for _, e := range x {
			if !refLimits(e, depth+1) {
				return false
			}
		}
	case []any:
		if depth > maxHeaderDepth || len(x) > maxTableEntries {
			return false
		}
		for _, e := range x {
			if !refLimits(e, depth+1) {
				return false
			}
		}
	}
	return true
}

// FuzzValidator sends random messages through the validator: each is
// refused with ErrInvalid, or accepted, and then its headers encode (by an
// independent encoder) to exactly the size the validator counted, within
// the reader's limits and the frame, with no Go int that would be cut.
// The integration suite's FuzzHardeningRoundTrip publishes what is
// accepted and reads it back.
func FuzzValidator(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0, 0, 0, 255, 16, 16, 16})
	f.Add([]byte("a long enough seed to make a table with a few values in it, some deep ones"))
	f.Add(bytes.Repeat([]byte{255}, 64))
	f.Add(bytes.Repeat([]byte{16, 0, 2, 8}, 30))
	f.Fuzz(func(t *testing.T, data []byte) {
		key, m := fuzzMessage(data)
		pub := m.publishing()
		cp, err := checkPublish("", key, pub)
		if err == nil {
			err = cp.fitsFrame(defaultFrameMax)
		}
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("refused without ErrInvalid: %v", err)
			}
			var ie *invalidError
			if !errors.As(err, &ie) || ie.Field == "" || ie.Problem == "" {
				t.Fatalf("the refusal names no field or limit: %v", err)
			}
			return
		}
		if len(key) > 255 {
			t.Fatal("a 256-byte routing key was accepted")
		}
		size := 14
		for _, s := range []string{pub.ContentType, pub.ContentEncoding, pub.CorrelationId, pub.ReplyTo, pub.Expiration, pub.MessageId, pub.Type, pub.UserId, pub.AppId} {
			if len(s) > 255 {
				t.Fatalf("a %d-byte property was accepted", len(s))
			}
			if s != "" {
				size += 1 + len(s)
			}
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
		if len(cp.pub.Headers) > 0 {
			var w bytes.Buffer
			if !refTable(&w, cp.pub.Headers) {
				t.Fatalf("accepted headers the reference encoder cannot write: %#v", cp.pub.Headers)
			}
			if !refLimits(cp.pub.Headers, 0) {
				t.Fatal("accepted headers past the reader's limits")
			}
			size += w.Len()
		}
		if size != cp.headerSize {
			t.Fatalf("the validator counted %d bytes of header frame; the reference encoder wrote %d", cp.headerSize, size)
		}
		if size > defaultFrameMax-frameOverhead {
			t.Fatal("accepted a header frame over frame_max")
		}
	})
}

// The validator never writes into the caller's headers: a Go int too big
// for 32 bits is converted in a copy.
func TestValidatorCopiesOnConvert(t *testing.T) {
	inner := amqp.Table{"big": int(1 << 40)}
	h := amqp.Table{"t": inner, "a": []any{int(1 << 33)}}
	cp, err := checkPublish("", "q", amqp.Publishing{Headers: h})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := inner["big"].(int); !ok {
		t.Error("the caller's nested table was modified")
	}
	if _, ok := h["a"].([]any)[0].(int); !ok {
		t.Error("the caller's array was modified")
	}
	if v := cp.pub.Headers["t"].(amqp.Table)["big"]; v != int64(1<<40) {
		t.Errorf("converted value %T %v", v, v)
	}
	small := amqp.Table{"n": 7}
	cp, _ = checkPublish("", "q", amqp.Publishing{Headers: small})
	if cp.pub.Headers["n"] != 7 {
		t.Error("an int that fits was converted")
	}
}

// fitHop trims the error text first, then the optional headers, and only
// then refuses.
func TestFitHop(t *testing.T) {
	pad := strings.Repeat("p", defaultFrameMax-3000)
	h := amqp.Table{"pad": pad, HeaderError: strings.Repeat("e", 4096), HeaderReason: "rejected", HeaderOriginalRoutingKey: strings.Repeat("k", 200)}
	cp, err := checkPublish("", "q.dlq", amqp.Publishing{Headers: h})
	if err != nil {
		t.Fatal(err)
	}
	fit, err := fitHop("", "q.dlq", cp, defaultFrameMax)
	if err != nil {
		t.Fatal(err)
	}
	if e := fit.pub.Headers[HeaderError].(string); len(e) >= 4096 || !strings.HasSuffix(e, "…") {
		t.Errorf("error text %d bytes", len(e))
	}
	if _, ok := fit.pub.Headers[HeaderOriginalRoutingKey]; !ok {
		t.Error("an optional header was dropped though a shorter error text was enough")
	}
	if len(h[HeaderError].(string)) != 4096 {
		t.Error("the caller's headers were modified")
	}
	// Past what trimming can do.
	h["pad"] = strings.Repeat("p", defaultFrameMax-60)
	cp, err = checkPublish("", "q.dlq", amqp.Publishing{Headers: h})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fitHop("", "q.dlq", cp, defaultFrameMax); !errors.Is(err, ErrInvalid) {
		t.Errorf("a hop that cannot fit: %v; want ErrInvalid", err)
	}
}
