package topology

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// ActionKind is what an [Action] declares.
type ActionKind string

// The kinds of declaration, in the order they are applied (a CheckQueue
// among the queues).
const (
	DeclareExchange ActionKind = "exchange"
	DeclareQueue    ActionKind = "queue"
	DeclareBinding  ActionKind = "binding"
	// CheckQueue checks that a queue declared elsewhere exists
	// ([Existing]); its Detail is "declared elsewhere".
	CheckQueue ActionKind = "check queue"
)

// Action is one line of a plan: declare Kind Name (Detail). For a binding
// the name is the queue and the detail says from which exchange on which key.
type Action struct {
	Kind   ActionKind
	Name   string
	Detail string
}

// String is the action as the printout writes it, without indentation:
// "declare queue orders.dlq (durable)".
func (a Action) String() string {
	if a.Kind == CheckQueue {
		return string(a.Kind) + " " + a.Name + " (" + a.Detail + ")"
	}
	if a.Detail == "" {
		return "declare " + string(a.Kind) + " " + a.Name
	}
	return "declare " + string(a.Kind) + " " + a.Name + " (" + a.Detail + ")"
}

// Plan returns what applying the topology would declare, in order:
// exchanges, then queues, then bindings. It is a statement of intent, not a
// difference against a live broker. A topology that does not validate has
// no plan: the error is Validate's.
func (t *Topology) Plan() ([]Action, error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	return t.actions(), nil
}

func (t *Topology) actions() []Action {
	out := make([]Action, 0, len(t.exchanges)+len(t.queues)+len(t.bindings))
	for _, e := range t.exchanges {
		out = append(out, Action{DeclareExchange, e.v.Name, exchangeDetail(e.v)})
	}
	for _, q := range t.queues {
		if q.v.Existing {
			out = append(out, Action{CheckQueue, q.v.Name, "declared elsewhere"})
			continue
		}
		out = append(out, Action{DeclareQueue, q.v.Name, queueDetail(q.v)})
	}
	for _, b := range t.bindings {
		out = append(out, Action{DeclareBinding, b.v.Queue, bindingDetail(b.v)})
	}
	return out
}

// String prints the topology in the contract's format (docs/contract.md, "Topology and printout"), byte for byte
// the same in every AceMQ library:
//
//	Topology: 3 exchanges, 6 queues, 4 bindings
//	  declare exchange orders-events (topic, durable)
//	  ...
//
// A topology that does not validate prints what it would declare followed
// by one "  invalid: …" line per mistake.
func (t *Topology) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Topology: %d exchanges, %d queues, %d bindings\n", len(t.exchanges), len(t.queues), len(t.bindings))
	for _, a := range t.actions() {
		b.WriteString("  ")
		b.WriteString(a.String())
		b.WriteByte('\n')
	}
	if err := t.Validate(); err != nil {
		for _, line := range strings.Split(err.Error(), "\n") {
			b.WriteString("  invalid: ")
			b.WriteString(line)
			b.WriteByte('\n')
		}
	}
	return b.String()
}

func exchangeDetail(e Exchange) string {
	parts := []string{string(e.Kind)}
	if e.Durable {
		parts = append(parts, "durable")
	}
	if e.AutoDelete {
		parts = append(parts, "auto-delete")
	}
	if e.Internal {
		parts = append(parts, "internal")
	}
	return strings.Join(append(parts, formatArgs(e.Args)...), ", ")
}

func queueDetail(q Queue) string {
	var parts []string
	if q.Durable {
		parts = append(parts, "durable")
	}
	if q.Exclusive {
		parts = append(parts, "exclusive")
	}
	if q.AutoDelete {
		parts = append(parts, "auto-delete")
	}
	return strings.Join(append(parts, formatArgs(q.Args)...), ", ")
}

func bindingDetail(b Binding) string {
	key := b.Key
	if key == "" {
		key = "''"
	}
	return strings.Join(append([]string{"from " + b.Exchange + " on " + key}, formatArgs(b.Args)...), ", ")
}

// formatArgs writes arguments sorted by key as key=value: strings in single
// quotes, integers bare.
func formatArgs(t amqp.Table) []string {
	keys := make([]string, 0, len(t))
	for k := range t {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = k + "=" + formatValue(t[k])
	}
	return out
}

func formatTable(t amqp.Table) string {
	return "{" + strings.Join(formatArgs(t), ", ") + "}"
}

func formatValue(v any) string {
	switch x := v.(type) {
	case string:
		return "'" + x + "'"
	case []byte:
		return "'" + string(x) + "'"
	case int:
		return strconv.FormatInt(int64(x), 10)
	case int8:
		return strconv.FormatInt(int64(x), 10)
	case int16:
		return strconv.FormatInt(int64(x), 10)
	case int32:
		return strconv.FormatInt(int64(x), 10)
	case int64:
		return strconv.FormatInt(x, 10)
	case uint8:
		return strconv.FormatUint(uint64(x), 10)
	case uint16:
		return strconv.FormatUint(uint64(x), 10)
	case uint32:
		return strconv.FormatUint(uint64(x), 10)
	case float32:
		return formatFloat(float64(x), 32)
	case float64:
		return formatFloat(x, 64)
	case bool:
		return strconv.FormatBool(x)
	case nil:
		return "void"
	case time.Time:
		return x.UTC().Format(time.RFC3339)
	case amqp.Decimal:
		return fmt.Sprintf("decimal(%d, scale %d)", x.Value, x.Scale)
	case amqp.Table:
		return formatTable(x)
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = formatValue(e)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	default:
		return fmt.Sprintf("%v", x)
	}
}

// formatFloat always shows a float as one (40000.0, not 40000), so a float
// argument can never be mistaken for the integer the broker would compare
// it against.
func formatFloat(f float64, bits int) string {
	s := strconv.FormatFloat(f, 'g', -1, bits)
	if !strings.ContainsAny(s, ".eEnN") {
		s += ".0"
	}
	return s
}
