package outbox

import (
	"encoding/json"
	"errors"
	"maps"
	"strings"
	"testing"
	"time"
)

// The probe wakes the loops when the newest pending row changes to a row
// (not when the table empties), waits probeMin after a change and doubles
// its wait while nothing changes, to at most probeMax or PollInterval.
func TestProberWakesOnChangeAndBacksOff(t *testing.T) {
	r := &Relay{c: config{poll: time.Second}}
	p := r.newProber()
	if p.wait != probeMin || p.most != probeMax {
		t.Fatalf("new prober: wait %v most %v, want %v and %v", p.wait, p.most, probeMin, probeMax)
	}
	steps := []struct {
		top  int64
		wake bool
		wait time.Duration
	}{
		{0, false, probeMin},     // first look: an empty table
		{0, false, 2 * probeMin}, // unchanged: back off
		{0, false, 4 * probeMin},
		{0, false, probeMax},
		{0, false, probeMax},
		{7, true, probeMin}, // a commit
		{7, false, 2 * probeMin},
		{0, false, probeMin}, // published and deleted: nothing to wake for
		{9, true, probeMin},
		{8, true, probeMin}, // the newest went, an older one is left
	}
	for i, s := range steps {
		if got := p.saw(s.top); got != s.wake || p.wait != s.wait {
			t.Errorf("step %d (top %d): wake %v wait %v, want %v and %v", i, s.top, got, p.wait, s.wake, s.wait)
		}
	}
	short := (&Relay{c: config{poll: 3 * time.Millisecond}}).newProber()
	for range 5 {
		short.saw(1)
	}
	if short.wait != 3*time.Millisecond {
		t.Errorf("PollInterval 3 ms: the probe waits %v, want at most the poll", short.wait)
	}
}

// While every loop is in a batch the probe rests until one leaves it,
// rather than waking every millisecond for nothing (a tenth of the relay's
// CPU while it drained a backlog); with a loop idle it does not rest.
func TestProbeRestsWhileEveryLoopIsBusy(t *testing.T) {
	r := &Relay{idle: make(chan struct{}, 1)}
	if r.rest(t.Context()) {
		t.Fatal("rest waited with every loop idle")
	}
	r.busy.Store(loops)
	rested := make(chan bool, 1)
	go func() { rested <- r.rest(t.Context()) }()
	select {
	case <-rested:
		t.Fatal("rest returned while every loop was busy")
	case <-time.After(50 * time.Millisecond):
	}
	r.idle <- struct{}{} // a loop left its batch and took the next at once
	select {
	case <-rested:
		t.Fatal("rest returned while every loop was busy again")
	case <-time.After(50 * time.Millisecond):
	}
	r.busy.Add(-1)
	r.idle <- struct{}{}
	select {
	case got := <-rested:
		if !got {
			t.Fatal("rest said it did not wait")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("rest still waiting 5 s after a loop went idle")
	}
}

// The relay's lists go to PostgreSQL as one text value each, which every
// database/sql driver sends as it is: the ids as an array literal, the
// ordering keys as JSON (keys with quotes, backslashes, commas and braces
// come back unchanged).
func TestListArguments(t *testing.T) {
	if got := idsArg([]int64{1, -2, 9007199254740993}); got != "{1,-2,9007199254740993}" {
		t.Errorf("idsArg = %q", got)
	}
	if got := idsArg(nil); got != "{}" {
		t.Errorf("idsArg(nil) = %q, want {}", got)
	}
	want := map[string]int64{`k"1`: 3, `k\2,{x}`: 7, "ünï": 9}
	var back []struct {
		Key   string `json:"key"`
		MaxID int64  `json:"maxid"`
	}
	if err := json.Unmarshal([]byte(keysArg(want)), &back); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, e := range back {
		got[e.Key] = e.MaxID
	}
	if !maps.Equal(got, want) {
		t.Errorf("keysArg round trip: %v, want %v", got, want)
	}
}

// A relay's rows keep failing once failingAfter refusals came with no row
// published between them; a published row ends the run.
func TestRelayFailingAfterRefusalsInARow(t *testing.T) {
	r := &Relay{}
	refused := func(id int64) []refusal {
		return []refusal{{rw: &row{id: id, exchange: "billing", key: "invoice.voided", err: errors.New("mq: unroutable")}, attempts: 1}}
	}
	for i := range failingAfter - 1 {
		r.fails.note(0, refused(int64(i)))
		if err := r.failing(); err != nil {
			t.Fatalf("after %d refusals: %v, want not failing yet", i+1, err)
		}
	}
	r.fails.note(0, refused(42))
	err := r.failing()
	if err == nil || !strings.Contains(err.Error(), "row 42") || !strings.Contains(err.Error(), "unroutable") {
		t.Fatalf("after %d refusals: %v, want failing, naming the last row and its error", failingAfter, err)
	}
	r.fails.note(1, refused(43)) // a batch that published a row
	if err := r.failing(); err != nil {
		t.Fatalf("after a row was published: %v, want not failing", err)
	}
}
