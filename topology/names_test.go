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

func TestParseRung(t *testing.T) {
	cases := []struct {
		name    string
		queue   string
		wait    time.Duration
		durable bool
		ok      bool
	}{
		{"orders.new.retry.30s", "orders.new", 30 * time.Second, false, true},
		{"orders.new.retry.2m.quorum", "orders.new", 2 * time.Minute, true, true},
		{"a.retry.b.retry.2h", "a.retry.b", 2 * time.Hour, false, true},
		{"orders.new.retry.90s.quorum", "orders.new", 90 * time.Second, true, true},
		{"orders.new.retry.120s", "", 0, false, false}, // Short writes 2m
		{"orders.new.retry.0s", "", 0, false, false},
		{"orders.new.dlq", "", 0, false, false},
		{".retry.30s", "", 0, false, false},
		{"orders.new.retry.30s.quorum.quorum", "", 0, false, false},
		{"orders.new.retry.1m30s", "", 0, false, false},
	}
	for _, c := range cases {
		q, w, d, ok := topology.ParseRung(c.name)
		if q != c.queue || w != c.wait || d != c.durable || ok != c.ok {
			t.Errorf("topology.ParseRung(%q) = %q %v %v %v, want %q %v %v %v", c.name, q, w, d, ok, c.queue, c.wait, c.durable, c.ok)
		}
	}
	for _, d := range []time.Duration{time.Second, 40 * time.Second, 5 * time.Minute, 3 * time.Hour} {
		for _, name := range []string{topology.RungQueue("q.x", d), topology.DurableRungQueue("q.x", d)} {
			if q, w, _, ok := topology.ParseRung(name); !ok || q != "q.x" || w != d {
				t.Errorf("topology.ParseRung(%q) does not read back q.x %v: %q %v %v", name, d, q, w, ok)
			}
		}
	}
}
