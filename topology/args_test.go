package topology_test

import (
	"reflect"
	"testing"

	"github.com/acemq/acemq-go/topology"
)

// TestArgsTakesAPlainMap holds Args to a plain map[string]any, so a user
// gives broker arguments without importing amqp091-go, nested maps
// included: a nested map[string]any is validated and sent as a nested
// table, as amqp091's own Table would be.
func TestArgsTakesAPlainMap(t *testing.T) {
	if got, want := reflect.TypeOf(topology.Args).In(0), reflect.TypeFor[map[string]any](); got != want {
		t.Fatalf("topology.Args takes %v; want %v, so no amqp091-go import is needed", got, want)
	}
	tp := topology.New().
		Exchange("h", topology.Headers).
		Queue("q", topology.Args(map[string]any{
			"x-max-length": 10,
			"nested":       map[string]any{"a": "b", "deeper": map[string]any{"n": int32(1)}},
			"list":         []any{map[string]any{"k": "v"}},
		})).
		Binding("q", "h", "", topology.Args(map[string]any{"x-match": "all", "kind": "order"}))
	if err := tp.Validate(); err != nil {
		t.Fatalf("a plain map's arguments do not validate: %v", err)
	}
	q, ok := tp.QueueNamed("q")
	if !ok {
		t.Fatal("no queue q")
	}
	// amqp091 sends nested tables, not nested plain maps.
	if err := q.Args.Validate(); err != nil {
		t.Fatalf("the queue's arguments are not what amqp091 sends: %v", err)
	}
	// A bad value inside a nested plain map is still caught.
	bad := topology.New().Queue("q", topology.Args(map[string]any{"nested": map[string]any{"u": uint64(1)}}))
	if err := bad.Validate(); err == nil {
		t.Fatal("a uint64 inside a nested plain map was not refused")
	}
}
