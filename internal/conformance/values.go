package conformance

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Dir is the repository's conformance/ directory, found from this file's
// place in the source tree (tests run from their package's directory, so a
// path relative to the caller would depend on who calls).
func Dir() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "conformance"
	}
	return filepath.Join(filepath.Dir(file), "..", "..", "conformance")
}

// Load reads the vector file name (e.g. "names.json") from Dir into v.
// Unknown fields are an error: a vector field the runner does not read
// would be a rule nobody checks.
func Load(name string, v any) error {
	b, err := os.ReadFile(filepath.Join(Dir(), name))
	if err != nil {
		return err
	}
	return decodeStrict(b, v)
}

func decodeStrict(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return fmt.Errorf("trailing data after the JSON value")
	}
	return nil
}

// Typed is one AMQP field value as the vectors write it: an object with a
// single key, the field type, e.g. {"signedint": 4}. Its JSON is kept raw so
// a copy can be altered field by field.
type Typed = json.RawMessage

// The AMQP 0-9-1 field types the vectors name (RabbitMQ's names), with the
// tag each is sent as and the Go type amqp091-go sends and decodes it as:
// bool t bool, byte b int8, unsignedbyte B uint8, short s int16,
// unsignedshort u uint16, signedint I int32, unsignedint i uint32, long l
// int64, float f float32, double d float64, decimal D amqp.Decimal, longstr
// S string, binary x []byte, timestamp T time.Time, table F amqp.Table,
// array A []any, void V nil.
var fieldTypes = map[string]bool{
	"bool": true, "byte": true, "unsignedbyte": true, "short": true, "unsignedshort": true,
	"signedint": true, "unsignedint": true, "long": true, "float": true, "double": true,
	"decimal": true, "longstr": true, "binary": true, "timestamp": true, "table": true,
	"array": true, "void": true,
}

// Decode turns a typed vector value into the Go value amqp091-go sends for
// that AMQP type. vars fills {placeholders} in strings (nil: none).
func Decode(raw Typed, vars Vars) (any, error) {
	typ, val, err := split(raw)
	if err != nil {
		return nil, err
	}
	num := func(bits int) (int64, error) {
		var n json.Number
		if err := json.Unmarshal(val, &n); err != nil {
			return 0, fmt.Errorf("%s: %w", typ, err)
		}
		i, err := strconv.ParseInt(n.String(), 10, bits)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", typ, err)
		}
		return i, nil
	}
	unum := func(bits int) (uint64, error) {
		var n json.Number
		if err := json.Unmarshal(val, &n); err != nil {
			return 0, fmt.Errorf("%s: %w", typ, err)
		}
		u, err := strconv.ParseUint(n.String(), 10, bits)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", typ, err)
		}
		return u, nil
	}
	str := func() (string, error) {
		var s string
		if err := json.Unmarshal(val, &s); err != nil {
			return "", fmt.Errorf("%s: %w", typ, err)
		}
		return vars.Fill(s), nil
	}
	switch typ {
	case "bool":
		var b bool
		err := json.Unmarshal(val, &b)
		return b, err
	case "byte":
		i, err := num(8)
		return int8(i), err
	case "unsignedbyte":
		u, err := unum(8)
		return uint8(u), err
	case "short":
		i, err := num(16)
		return int16(i), err
	case "unsignedshort":
		u, err := unum(16)
		return uint16(u), err
	case "signedint":
		i, err := num(32)
		return int32(i), err
	case "unsignedint":
		u, err := unum(32)
		return uint32(u), err
	case "long":
		i, err := num(64)
		return i, err
	case "float":
		var f float32
		err := json.Unmarshal(val, &f)
		return f, err
	case "double":
		var f float64
		err := json.Unmarshal(val, &f)
		return f, err
	case "decimal":
		var d struct {
			Scale uint8 `json:"scale"`
			Value int32 `json:"value"`
		}
		err := decodeStrict(val, &d)
		return amqp.Decimal{Scale: d.Scale, Value: d.Value}, err
	case "longstr":
		return str()
	case "binary":
		s, err := str()
		return []byte(s), err
	case "timestamp":
		i, err := num(64)
		return time.Unix(i, 0).UTC(), err
	case "table":
		var m map[string]Typed
		if err := decodeStrict(val, &m); err != nil {
			return nil, fmt.Errorf("table: %w", err)
		}
		return DecodeTable(m, vars)
	case "array":
		var l []Typed
		if err := decodeStrict(val, &l); err != nil {
			return nil, fmt.Errorf("array: %w", err)
		}
		out := make([]any, len(l))
		for i, e := range l {
			v, err := Decode(e, vars)
			if err != nil {
				return nil, fmt.Errorf("array element %d: %w", i, err)
			}
			out[i] = v
		}
		return out, nil
	case "void":
		return nil, nil
	}
	return nil, fmt.Errorf("unknown AMQP field type %q", typ)
}

// split reads {"type": value}.
func split(raw Typed) (string, json.RawMessage, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil || len(m) != 1 {
		return "", nil, fmt.Errorf("a typed value is an object with one key, the AMQP type: %s", raw)
	}
	for k, v := range m {
		if !fieldTypes[k] {
			return "", nil, fmt.Errorf("unknown AMQP field type %q in %s", k, raw)
		}
		return k, v, nil
	}
	panic("unreachable")
}

// TypeName is the AMQP type of a typed vector value ("longstr", …).
func TypeName(raw Typed) string {
	t, _, _ := split(raw)
	return t
}

// DecodeTable decodes a table of typed values. A nil or empty map is a nil
// table: no arguments at all.
func DecodeTable(m map[string]Typed, vars Vars) (amqp.Table, error) {
	if len(m) == 0 {
		return nil, nil
	}
	t := make(amqp.Table, len(m))
	for k, raw := range m {
		v, err := Decode(raw, vars)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", k, err)
		}
		t[k] = v
	}
	return t, nil
}

// Canon writes a Go field value with its AMQP type, exactly: long(40000)
// and double(40000) differ, as they do to the broker. Tables are written
// with sorted keys.
func Canon(v any) string {
	switch x := v.(type) {
	case bool:
		return fmt.Sprintf("bool(%v)", x)
	case int8:
		return fmt.Sprintf("byte(%d)", x)
	case uint8:
		return fmt.Sprintf("unsignedbyte(%d)", x)
	case int16:
		return fmt.Sprintf("short(%d)", x)
	case uint16:
		return fmt.Sprintf("unsignedshort(%d)", x)
	case int32:
		return fmt.Sprintf("signedint(%d)", x)
	case uint32:
		return fmt.Sprintf("unsignedint(%d)", x)
	case int64:
		return fmt.Sprintf("long(%d)", x)
	case int:
		// amqp091-go sends a Go int as a signed 32-bit int.
		return fmt.Sprintf("signedint(%d)", x)
	case float32:
		return "float(" + strconv.FormatFloat(float64(x), 'g', -1, 32) + ")"
	case float64:
		return "double(" + strconv.FormatFloat(x, 'g', -1, 64) + ")"
	case amqp.Decimal:
		return fmt.Sprintf("decimal(%d, scale %d)", x.Value, x.Scale)
	case string:
		return "longstr(" + strconv.Quote(x) + ")"
	case []byte:
		return "binary(" + strconv.Quote(string(x)) + ")"
	case time.Time:
		return fmt.Sprintf("timestamp(%d)", x.Unix())
	case amqp.Table:
		return "table" + CanonTable(x)
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = Canon(e)
		}
		return "array[" + strings.Join(parts, ", ") + "]"
	case nil:
		return "void"
	}
	return fmt.Sprintf("unsupported(%T %v)", v, v)
}

// CanonTable writes a table as {k: Canon(v), …} with sorted keys; a nil
// and an empty table are both {}.
func CanonTable(t amqp.Table) string {
	keys := make([]string, 0, len(t))
	for k := range t {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + ": " + Canon(t[k])
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// Vars fill the {placeholders} of string values: {queue} and the like, so
// one vector serves every test run's own names.
type Vars map[string]string

// Fill fills the placeholders of s.
func (vs Vars) Fill(s string) string {
	if len(vs) == 0 || !strings.Contains(s, "{") {
		return s
	}
	for k, v := range vs {
		s = strings.ReplaceAll(s, "{"+k+"}", v)
	}
	return s
}

// ms is a vector's integer milliseconds as a time.Duration.
func ms(n int64) time.Duration {
	if n > math.MaxInt64/int64(time.Millisecond) {
		return math.MaxInt64
	}
	return time.Duration(n) * time.Millisecond
}
