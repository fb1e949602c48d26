package outbox

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/mq"
)

// props is a message's properties as the properties column stores them:
// readable in psql, and read back to exactly what was written (each header
// value keeps its Go type, see value).
type props struct {
	ContentType     string           `json:"content_type,omitempty"`
	ContentEncoding string           `json:"content_encoding,omitempty"`
	DeliveryMode    uint8            `json:"delivery_mode,omitempty"`
	Priority        uint8            `json:"priority,omitempty"`
	CorrelationID   string           `json:"correlation_id,omitempty"`
	ReplyTo         string           `json:"reply_to,omitempty"`
	Expiration      string           `json:"expiration,omitempty"`
	MessageID       string           `json:"message_id,omitempty"`
	Timestamp       *time.Time       `json:"timestamp,omitempty"`
	Type            string           `json:"type,omitempty"`
	UserID          string           `json:"user_id,omitempty"`
	AppID           string           `json:"app_id,omitempty"`
	Headers         map[string]value `json:"headers,omitempty"`
}

// value is one header value with its type: {"t":"i32","v":7}. Integers and
// floats are written as strings, so no JSON reader rounds them.
type value struct {
	T string          `json:"t"`
	V json.RawMessage `json:"v,omitempty"`
}

// encodeProps is m's properties and headers for the properties column.
func encodeProps(m *mq.Message) ([]byte, error) {
	p := props{
		ContentType: m.ContentType, ContentEncoding: m.ContentEncoding,
		DeliveryMode: m.DeliveryMode, Priority: m.Priority,
		CorrelationID: m.CorrelationId, ReplyTo: m.ReplyTo, Expiration: m.Expiration,
		MessageID: m.MessageId, Type: m.Type, UserID: m.UserId, AppID: m.AppId,
	}
	if !m.Timestamp.IsZero() {
		ts := m.Timestamp
		p.Timestamp = &ts
	}
	if len(m.Headers) > 0 {
		h, err := encodeTable(m.Headers)
		if err != nil {
			return nil, err
		}
		p.Headers = h
	}
	return json.Marshal(p)
}

// decodeProps reads the properties column back into a message (body
// aside).
func decodeProps(b []byte) (mq.Message, error) {
	var p props
	if err := json.Unmarshal(b, &p); err != nil {
		return mq.Message{}, fmt.Errorf("outbox: properties: %w", err)
	}
	m := mq.Message{
		ContentType: p.ContentType, ContentEncoding: p.ContentEncoding,
		DeliveryMode: p.DeliveryMode, Priority: p.Priority,
		CorrelationId: p.CorrelationID, ReplyTo: p.ReplyTo, Expiration: p.Expiration,
		MessageId: p.MessageID, Type: p.Type, UserId: p.UserID, AppId: p.AppID,
	}
	if p.Timestamp != nil {
		m.Timestamp = *p.Timestamp
	}
	if p.Headers != nil {
		t, err := decodeTable(p.Headers)
		if err != nil {
			return mq.Message{}, err
		}
		m.Headers = t
	}
	return m, nil
}

func encodeTable(t amqp.Table) (map[string]value, error) {
	out := make(map[string]value, len(t))
	for k, v := range t {
		ev, err := encodeValue(v)
		if err != nil {
			return nil, fmt.Errorf("%w: header %q: %w", ErrHeader, k, err)
		}
		out[k] = ev
	}
	return out, nil
}

func decodeTable(m map[string]value) (amqp.Table, error) {
	t := make(amqp.Table, len(m))
	for k, ev := range m {
		v, err := decodeValue(ev)
		if err != nil {
			return nil, fmt.Errorf("outbox: header %q: %w", k, err)
		}
		t[k] = v
	}
	return t, nil
}

func raw(v any) json.RawMessage {
	b, _ := json.Marshal(v) // strings, bools, []byte, structs of them: cannot fail
	return b
}

func num(s string) value { return value{V: raw(s)} }

func encodeValue(v any) (value, error) {
	var ev value
	switch x := v.(type) {
	case nil:
		return value{T: "null"}, nil
	case bool:
		return value{T: "bool", V: raw(x)}, nil
	case string:
		return value{T: "s", V: raw(x)}, nil
	case []byte:
		return value{T: "b", V: raw(x)}, nil
	case int8:
		ev, ev.T = num(strconv.FormatInt(int64(x), 10)), "i8"
	case int16:
		ev, ev.T = num(strconv.FormatInt(int64(x), 10)), "i16"
	case int32:
		ev, ev.T = num(strconv.FormatInt(int64(x), 10)), "i32"
	case int64:
		ev, ev.T = num(strconv.FormatInt(x, 10)), "i64"
	case int:
		ev, ev.T = num(strconv.FormatInt(int64(x), 10)), "int"
	case uint8:
		ev, ev.T = num(strconv.FormatUint(uint64(x), 10)), "u8"
	case uint16:
		ev, ev.T = num(strconv.FormatUint(uint64(x), 10)), "u16"
	case uint32:
		ev, ev.T = num(strconv.FormatUint(uint64(x), 10)), "u32"
	case float32:
		ev, ev.T = num(strconv.FormatFloat(float64(x), 'g', -1, 32)), "f32"
	case float64:
		ev, ev.T = num(strconv.FormatFloat(x, 'g', -1, 64)), "f64"
	case time.Time:
		return value{T: "time", V: raw(x.Format(time.RFC3339Nano))}, nil
	case amqp.Decimal:
		return value{T: "dec", V: raw(x)}, nil
	case amqp.Table:
		t, err := encodeTable(x)
		if err != nil {
			return value{}, err
		}
		return value{T: "table", V: raw(t)}, nil
	case []any:
		arr := make([]value, len(x))
		for i, e := range x {
			ae, err := encodeValue(e)
			if err != nil {
				return value{}, fmt.Errorf("element %d: %w", i, err)
			}
			arr[i] = ae
		}
		return value{T: "array", V: raw(arr)}, nil
	default:
		return value{}, fmt.Errorf("type %T", v)
	}
	return ev, nil
}

// numbers read a number back from the string it is written as, into the
// type its tag names.
var numbers = map[string]func(s string) (any, error){
	"i8":  func(s string) (any, error) { n, err := strconv.ParseInt(s, 10, 8); return int8(n), err },
	"i16": func(s string) (any, error) { n, err := strconv.ParseInt(s, 10, 16); return int16(n), err },
	"i32": func(s string) (any, error) { n, err := strconv.ParseInt(s, 10, 32); return int32(n), err },
	"i64": func(s string) (any, error) { return strconv.ParseInt(s, 10, 64) },
	"int": func(s string) (any, error) { n, err := strconv.ParseInt(s, 10, 64); return int(n), err },
	"u8":  func(s string) (any, error) { n, err := strconv.ParseUint(s, 10, 8); return uint8(n), err },
	"u16": func(s string) (any, error) { n, err := strconv.ParseUint(s, 10, 16); return uint16(n), err },
	"u32": func(s string) (any, error) { n, err := strconv.ParseUint(s, 10, 32); return uint32(n), err },
	"f32": func(s string) (any, error) { f, err := strconv.ParseFloat(s, 32); return float32(f), err },
	"f64": func(s string) (any, error) { return strconv.ParseFloat(s, 64) },
}

func decodeValue(ev value) (any, error) {
	var s string
	str := func() error { return json.Unmarshal(ev.V, &s) }
	if parse, ok := numbers[ev.T]; ok {
		if err := str(); err != nil {
			return nil, err
		}
		return parse(s)
	}
	switch ev.T {
	case "null":
		return nil, nil
	case "bool":
		var b bool
		err := json.Unmarshal(ev.V, &b)
		return b, err
	case "s":
		err := str()
		return s, err
	case "b":
		var b []byte
		err := json.Unmarshal(ev.V, &b)
		if b == nil {
			b = []byte{}
		}
		return b, err
	case "time":
		if err := str(); err != nil {
			return nil, err
		}
		return time.Parse(time.RFC3339Nano, s)
	case "dec":
		var d amqp.Decimal
		err := json.Unmarshal(ev.V, &d)
		return d, err
	case "table":
		var m map[string]value
		if err := json.Unmarshal(ev.V, &m); err != nil {
			return nil, err
		}
		return decodeTable(m)
	case "array":
		var arr []value
		if err := json.Unmarshal(ev.V, &arr); err != nil {
			return nil, err
		}
		out := make([]any, len(arr))
		for i, ae := range arr {
			v, err := decodeValue(ae)
			if err != nil {
				return nil, fmt.Errorf("element %d: %w", i, err)
			}
			out[i] = v
		}
		return out, nil
	}
	return nil, fmt.Errorf("unknown value type %q", ev.T)
}
