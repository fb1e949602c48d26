package ops

import (
	"testing"
	"time"
)

func TestFilterMatch(t *testing.T) {
	now := time.Unix(1700003600, 0)
	p := Peeked{MessageId: "m1", Reason: "exhausted", Error: "db down", FailedAt: time.Unix(1700000000, 0)}
	for _, c := range []struct {
		f    Filter
		want bool
	}{
		{Filter{}, true},
		{Filter{Reason: "exhausted"}, true},
		{Filter{Reason: "parked"}, false},
		{Filter{Error: "db"}, true},
		{Filter{Error: "disk"}, false},
		{Filter{MessageId: "m1"}, true},
		{Filter{MessageId: "m2"}, false},
		{Filter{OlderThan: 30 * time.Minute}, true},
		{Filter{OlderThan: 2 * time.Hour}, false},
		{Filter{Reason: "exhausted", MessageId: "m2"}, false},
	} {
		c.f.Now = func() time.Time { return now }
		if got := c.f.Match(p); got != c.want {
			t.Errorf("%+v.Match = %v, want %v", c.f, got, c.want)
		}
	}
	// Without failed-at the timestamp counts; with neither, OlderThan never matches.
	f := Filter{OlderThan: time.Minute, Now: func() time.Time { return now }}
	if !f.Match(Peeked{Timestamp: time.Unix(1700000000, 0)}) || f.Match(Peeked{}) {
		t.Error("OlderThan: timestamp fallback or no-time case wrong")
	}
}
