package ops

import (
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
)

// The classic set can be retired only when it exists, holds nothing, and
// durable rungs have taken its place.
func TestRungsRetirable(t *testing.T) {
	c := func(ready, consumers int) RungCount {
		return RungCount{Queue: "q.retry.5s", Ready: ready, Consumers: consumers}
	}
	d := func(ready int) RungCount { return RungCount{Queue: "q.retry.5s.quorum", Durable: true, Ready: ready} }
	for _, tc := range []struct {
		name string
		rs   []RungCount
		want bool
	}{
		{"none", nil, false},
		{"classic only, empty", []RungCount{c(0, 0)}, false},
		{"durable only", []RungCount{d(3)}, false},
		{"both, classic empty", []RungCount{c(0, 0), c(0, 0), d(4)}, true},
		{"both, classic holding one", []RungCount{c(0, 0), c(1, 0), d(0)}, false},
		{"both, classic consumed", []RungCount{c(0, 1), d(0)}, false},
	} {
		if got := RungsRetirable(tc.rs); got != tc.want {
			t.Errorf("%s: RungsRetirable = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// Peeked.LastRung is the newest rung the broker's x-death names (RabbitMQ
// lists the newest first), classic or durable; empty when none is a rung.
func TestPeekedLastRung(t *testing.T) {
	death := func(queues ...string) amqp.Table {
		var ds []any
		for _, q := range queues {
			ds = append(ds, amqp.Table{"queue": q, "reason": "expired", "count": int64(1)})
		}
		return amqp.Table{"x-death": ds}
	}
	for _, tc := range []struct {
		h    amqp.Table
		want string
	}{
		{death("q.retry.5s.quorum", "q.retry.1s"), "q.retry.5s.quorum"},
		{death("q.retry.1s"), "q.retry.1s"},
		{death("q", "q.retry.1s"), "q.retry.1s"},
		{death("q"), ""},
		{nil, ""},
	} {
		if got := peeked("q.dlq", 1, amqp.Delivery{Headers: tc.h}).LastRung; got != tc.want {
			t.Errorf("x-death %v: LastRung %q, want %q", tc.h, got, tc.want)
		}
	}
}
