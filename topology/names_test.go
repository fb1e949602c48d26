package topology_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/acemq/acemq-go/topology"
)

// The names (short(), the suffixes, rung names) and the argument tables
// with their AMQP types are pinned by conformance/names.json and
// topologies.json (TestConformanceNames, TestConformanceTopologies). What
// is left here is Go's own: the tables are fresh values.

func TestRungArgumentsAreFresh(t *testing.T) {
	want := topology.RungArguments("shipping.orders", 40*time.Second)
	if err := want.Validate(); err != nil {
		t.Errorf("RungArguments is not a valid AMQP table: %v", err)
	}
	got := topology.RungArguments("shipping.orders", 40*time.Second)
	got[topology.ArgMessageTTL] = 1.5
	if again := topology.RungArguments("shipping.orders", 40*time.Second); !reflect.DeepEqual(again, want) {
		t.Errorf("RungArguments shares its table between calls: %#v", again)
	}
	dl := topology.DeadLetterArguments("orders.new")
	dl[topology.ArgDeadLetterExchange] = "changed"
	if again := topology.DeadLetterArguments("orders.new"); again[topology.ArgDeadLetterExchange] != topology.DeadLetterExchange {
		t.Errorf("DeadLetterArguments shares its table between calls: %#v", again)
	}
}
