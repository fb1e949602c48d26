package outbox

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/mq"
)

// props is a message's properties as the properties column stores them:
// readable in psql, and read back to exactly what was written, byte for
// byte (each header value keeps its Go type, see value).
//
// jsonb holds text only: valid UTF-8 without NUL bytes. What is not (AMQP
// short strings and header strings are bytes, and mq.Publisher carries any)
// is kept in another form, never changed: a property in Raw (by its JSON
// name, the bytes in base64, its field left empty), a header string as
// type "sb" (its bytes in base64), a table key as escapeKey writes it.
type props struct {
	ContentType     string            `json:"content_type,omitempty"`
	ContentEncoding string            `json:"content_encoding,omitempty"`
	DeliveryMode    uint8             `json:"delivery_mode,omitempty"`
	Priority        uint8             `json:"priority,omitempty"`
	CorrelationID   string            `json:"correlation_id,omitempty"`
	ReplyTo         string            `json:"reply_to,omitempty"`
	Expiration      string            `json:"expiration,omitempty"`
	MessageID       string            `json:"message_id,omitempty"`
	Timestamp       *time.Time        `json:"timestamp,omitempty"`
	Type            string            `json:"type,omitempty"`
	UserID          string            `json:"user_id,omitempty"`
	AppID           string            `json:"app_id,omitempty"`
	Headers         map[string]value  `json:"headers,omitempty"`
	Raw             map[string][]byte `json:"raw,omitempty"`
}

// isText says whether jsonb (and PostgreSQL's text) can hold s as it is:
// valid UTF-8 without a NUL byte.
func isText(s string) bool { return utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 }

// keyEscape starts a table key stored in base64: a key that is not text,
// or one that is but begins with this byte itself.
const keyEscape = "\x01"

// escapeKey is a table key as the column stores it: as it is when it is
// text not beginning with keyEscape, else keyEscape and its bytes in
// base64. unescapeKey undoes it.
func escapeKey(k string) string {
	if isText(k) && !strings.HasPrefix(k, keyEscape) {
		return k
	}
	return keyEscape + base64.StdEncoding.EncodeToString([]byte(k))
}

func unescapeKey(k string) string {
	rest, ok := strings.CutPrefix(k, keyEscape)
	if !ok {
		return k
	}
	b, err := base64.StdEncoding.DecodeString(rest)
	if err != nil {
		// Written before keys were escaped: the key as it was.
		return k
	}
	return string(b)
}

// value is one header value with its type: {"t":"i32","v":7}. Integers and
// floats are written as strings, so no JSON reader rounds them.
type value struct {
	T string          `json:"t"`
	V json.RawMessage `json:"v,omitempty"`
}

// encodeProps is m's properties and headers for the properties column.
func encodeProps(m *mq.Message) ([]byte, error) {
	p := props{DeliveryMode: m.DeliveryMode, Priority: m.Priority}
	for _, f := range textProps(&p) {
		v := f.of(m)
		if isText(v) {
			*f.field = v
			continue
		}
		if p.Raw == nil {
			p.Raw = map[string][]byte{}
		}
		p.Raw[f.name] = []byte(v)
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
	for _, f := range textProps(&p) {
		if b, ok := p.Raw[f.name]; ok {
			*f.field = string(b)
		}
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

// textProp is one of the message's short-string properties: its JSON name
// (the key in props.Raw), where props keeps it, and how to read it from a
// message.
type textProp struct {
	name  string
	field *string
	of    func(m *mq.Message) string
}

// textProps is p's short-string properties.
func textProps(p *props) []textProp {
	return []textProp{
		{"content_type", &p.ContentType, func(m *mq.Message) string { return m.ContentType }},
		{"content_encoding", &p.ContentEncoding, func(m *mq.Message) string { return m.ContentEncoding }},
		{"correlation_id", &p.CorrelationID, func(m *mq.Message) string { return m.CorrelationId }},
		{"reply_to", &p.ReplyTo, func(m *mq.Message) string { return m.ReplyTo }},
		{"expiration", &p.Expiration, func(m *mq.Message) string { return m.Expiration }},
		{"message_id", &p.MessageID, func(m *mq.Message) string { return m.MessageId }},
		{"type", &p.Type, func(m *mq.Message) string { return m.Type }},
		{"user_id", &p.UserID, func(m *mq.Message) string { return m.UserId }},
		{"app_id", &p.AppID, func(m *mq.Message) string { return m.AppId }},
	}
}

func encodeTable(t amqp.Table) (map[string]value, error) {
	out := make(map[string]value, len(t))
	for k, v := range t {
		ev, err := encodeValue(v)
		if err != nil {
			return nil, fmt.Errorf("%w: header %q: %w", ErrHeader, k, err)
		}
		out[escapeKey(k)] = ev
	}
	return out, nil
}

func decodeTable(m map[string]value) (amqp.Table, error) {
	t := make(amqp.Table, len(m))
	for ek, ev := range m {
		k := unescapeKey(ek)
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
		if !isText(x) {
			return value{T: "sb", V: raw([]byte(x))}, nil
		}
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
	case "sb":
		var b []byte
		err := json.Unmarshal(ev.V, &b)
		return string(b), err
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
