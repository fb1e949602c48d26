package topology_test

import (
	"reflect"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/topology"
)

// TestShort pins contract §1's short(delay).
func TestShort(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want string
	}{
		{0, "0s"},
		{-time.Second, "0s"},
		{-time.Hour, "0s"},
		{500 * time.Millisecond, "0s"},
		{999 * time.Millisecond, "0s"},
		{time.Second, "1s"},
		{1500 * time.Millisecond, "1s"}, // truncated, not rounded
		{30 * time.Second, "30s"},
		{59 * time.Second, "59s"},
		{60 * time.Second, "1m"},
		{61 * time.Second, "61s"},
		{90 * time.Second, "90s"},
		{120 * time.Second, "2m"},
		{120*time.Second + 999*time.Millisecond, "2m"},
		{3599 * time.Second, "3599s"},
		{3600 * time.Second, "1h"},
		{3601 * time.Second, "3601s"},
		{3660 * time.Second, "61m"},
		{5400 * time.Second, "90m"},
		{7200 * time.Second, "2h"},
		{48 * time.Hour, "48h"},
	}
	for _, tc := range tests {
		if got := topology.Short(tc.d); got != tc.want {
			t.Errorf("Short(%v) = %q, want %q", tc.d, got, tc.want)
		}
	}
}

// TestNames pins contract §1's suffixes, rung names and exchange names.
func TestNames(t *testing.T) {
	tests := []struct{ got, want string }{
		{topology.DeadLetterQueue("orders.new"), "orders.new.dlq"},
		{topology.ParkedQueue("orders.new"), "orders.new.parked"},
		{topology.RetryQueue("orders.new", 30*time.Second), "orders.new.retry.30s"},
		{topology.RetryQueue("orders.new", 90*time.Second), "orders.new.retry.90s"},
		{topology.RetryQueue("orders.new", 2*time.Minute), "orders.new.retry.2m"},
		{topology.RetryQueue("orders.new", 2*time.Hour), "orders.new.retry.2h"},
		{topology.RetryQueue("shipping.orders", 160*time.Second), "shipping.orders.retry.160s"},
		{topology.DeadLetterExchange, "acemq.dlx"},
		{topology.RetryExchange, "acemq.retry"},
		{topology.DeadLetterSuffix, ".dlq"},
		{topology.ParkedSuffix, ".parked"},
		{topology.RetrySegment, ".retry."},
		{topology.QueueTypeQuorum, "quorum"},
	}
	for i, tc := range tests {
		if tc.got != tc.want {
			t.Errorf("case %d: got %q, want %q", i, tc.got, tc.want)
		}
	}
}

func TestRungArguments(t *testing.T) {
	got := topology.RungArguments("shipping.orders", 40*time.Second)
	want := amqp.Table{
		"x-dead-letter-exchange":    "acemq.retry",
		"x-dead-letter-routing-key": "shipping.orders",
		"x-message-ttl":             int64(40000),
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("RungArguments = %#v, want %#v", got, want)
	}
	// The TTL's Go type decides the AMQP type on the wire: a float is a
	// different argument to the broker (contract §2).
	for _, d := range []time.Duration{time.Second, 40 * time.Second, 2 * time.Hour} {
		ttl := topology.RungArguments("q", d)["x-message-ttl"]
		v, ok := ttl.(int64)
		if !ok {
			t.Fatalf("x-message-ttl for %v is %T, want int64", d, ttl)
		}
		if v != d.Milliseconds() {
			t.Errorf("x-message-ttl for %v = %d, want %d", d, v, d.Milliseconds())
		}
	}
	if err := got.Validate(); err != nil {
		t.Errorf("RungArguments is not a valid AMQP table: %v", err)
	}
	// Every call builds a fresh table.
	got["x-message-ttl"] = 1.5
	if again := topology.RungArguments("shipping.orders", 40*time.Second); !reflect.DeepEqual(again, want) {
		t.Errorf("RungArguments shares its table between calls: %#v", again)
	}
}

func TestDeadLetterArguments(t *testing.T) {
	got := topology.DeadLetterArguments("orders.new")
	want := amqp.Table{
		"x-dead-letter-exchange":    "acemq.dlx",
		"x-dead-letter-routing-key": "orders.new.dlq",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("DeadLetterArguments = %#v, want %#v", got, want)
	}
}
