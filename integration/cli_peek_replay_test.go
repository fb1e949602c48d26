//go:build integration

package integration

import (
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq-go/internal/testenv"
	"github.com/acemq/acemq-go/mq"
)

// Issue 29: `acemq peek --json` carries the replay record
// (x-acemq-replayed-at, x-acemq-replayed-from) the text output shows:
// docs/contract.md calls it the one thing worth knowing before a second
// replay. A message never replayed has neither field.
func TestCLIPeekJSONReplayRecord(t *testing.T) {
	b := testenv.Broker(t, mq.Config{})
	q, dlq, _ := opsSetup(t, b)
	msgs := opsDeadLetters(q, 2)
	at := time.Unix(1700000200, 0).UTC()
	msgs[0].Headers[mq.HeaderReplayedAt] = at
	msgs[0].Headers[mq.HeaderReplayedFrom] = dlq
	testenv.Publish(t, b, dlq, msgs...)

	code, out, errs := cliRun(t, "", "peek", dlq, "-n", "1")
	if code != 0 || !strings.Contains(out, "replayed:        "+at.Format(time.RFC3339)+" from "+dlq) {
		t.Fatalf("peek (text): exit %d, stderr %q\n%s", code, errs, out)
	}
	code, v, errs := cliJSON(t, "", "peek", dlq, "-n", "2")
	ms, _ := v["messages"].([]any)
	if code != 0 || len(ms) != 2 {
		t.Fatalf("peek --json: exit %d, %v, stderr %q", code, v, errs)
	}
	m0, m1 := ms[0].(map[string]any), ms[1].(map[string]any)
	if m0["replayed_at"] != at.Format(time.RFC3339) || m0["replayed_from"] != dlq {
		t.Errorf("peek --json of a replayed message: replayed_at %v, replayed_from %v; want %s, %s (all fields: %v)",
			m0["replayed_at"], m0["replayed_from"], at.Format(time.RFC3339), dlq, m0)
	}
	if _, ok := m1["replayed_at"]; ok {
		t.Errorf("peek --json of a message never replayed has replayed_at: %v", m1)
	}
	if _, ok := m1["replayed_from"]; ok {
		t.Errorf("peek --json of a message never replayed has replayed_from: %v", m1)
	}
}
