package mq

import (
	"math"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// memoCopy is a delivery of message id as the broker hands it over:
// redelivered or fresh, carrying x-acemq-attempt header (0: none).
func memoCopy(id string, redelivered bool, header int) amqp.Delivery {
	raw := amqp.Delivery{MessageId: id, Redelivered: redelivered}
	if header > 0 {
		raw.Headers = amqp.Table{HeaderAttempt: attemptValue(header)}
	}
	return raw
}

// returned is what settle hands the memo: raw, handled up to attempt used.
func returned(raw amqp.Delivery, used int) *Delivery {
	d := received(raw)
	d.attempt, d.used = max(used, AttemptOf(raw.Headers)), used
	return d
}

func TestMemoIsNeverReadByAFreshDelivery(t *testing.T) {
	var m attemptMemo
	m.remember(returned(memoCopy("dup", true, 0), 6))
	if got, _ := m.recall(memoCopy("dup", false, 0)); got != 1 {
		t.Fatalf("a fresh message with the id of one returned earlier reads attempt %d, want 1", got)
	}
	if got, _ := m.recall(memoCopy("dup", true, 0)); got != 7 {
		t.Fatalf("the returned copy's redelivery reads attempt %d, want 7", got)
	}
}

func TestMemoEntryEndsWithTheRedeliveryItDescribes(t *testing.T) {
	var m attemptMemo
	m.remember(returned(memoCopy("m", true, 0), 1))
	if got, _ := m.recall(memoCopy("m", true, 0)); got != 2 {
		t.Fatalf("the redelivery reads attempt %d, want 2", got)
	}
	// Another replica took the next copy and it came back, dead-lettered
	// and replayed, to this one: nothing here describes it.
	if got, _ := m.recall(memoCopy("m", true, 0)); got != 1 {
		t.Fatalf("a second redelivery of the id reads attempt %d from a spent entry, want 1", got)
	}
}

func TestMemoMatchesTheCopyItDescribes(t *testing.T) {
	var m attemptMemo
	m.remember(returned(memoCopy("r", true, 0), 2))
	replay := memoCopy("r", true, 0)
	replay.Headers = amqp.Table{HeaderReplayedAt: time.Now().UTC()}
	if got, _ := m.recall(replay); got != 1 {
		t.Fatalf("a redelivered replay reads attempt %d from the memo of the copy before it, want 1", got)
	}
}

func TestMemoEvictsOnlyPastItsSize(t *testing.T) {
	var m attemptMemo
	m.remember(returned(memoCopy("kept", true, 0), 1))
	// Another message comes back again and again, each return settled.
	for range memoSize {
		m.remember(returned(memoCopy("busy", true, 0), 1))
		m.recall(memoCopy("busy", true, 0))
	}
	m.remember(returned(memoCopy("new", true, 0), 1))
	if got, _ := m.recall(memoCopy("kept", true, 0)); got != 2 {
		t.Fatalf("with 2 entries in a memo of %d, the older reads attempt %d, want 2", memoSize, got)
	}
}

func TestAsidePauseDoublesWithTheReturnsCounted(t *testing.T) {
	p := 200 * time.Millisecond
	cases := []struct {
		h    amqp.Table
		want time.Duration
	}{
		{nil, p},
		{amqp.Table{headerDeliveryCount: int64(3)}, 8 * p},
		{amqp.Table{headerAcquiredCount: int64(2), headerDeliveryCount: int64(0)}, 4 * p},
		{amqp.Table{headerDeliveryCount: int64(40)}, asidePauseMax},
		{amqp.Table{headerAcquiredCount: int64(1 << 40)}, asidePauseMax},
	}
	for _, c := range cases {
		if got := asidePause(p, c.h); got != c.want {
			t.Errorf("asidePause(%v, %v) = %v, want %v", p, c.h, got, c.want)
		}
	}
}

func TestAttemptValueReadsBackAsWritten(t *testing.T) {
	for _, n := range []int{1, 2, 7, math.MaxInt32} {
		v := attemptValue(n)
		if got := AttemptOf(amqp.Table{HeaderAttempt: v}); got != n {
			t.Errorf("AttemptOf(attemptValue(%d) = %v) = %d", n, v, got)
		}
	}
	if v := attemptValue(math.MaxInt32 + 10); v != math.MaxInt32 {
		t.Errorf("attemptValue past the cap = %d, want %d", v, math.MaxInt32)
	}
}
