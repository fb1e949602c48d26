//go:build integration

package integration

// The console finds its queues through the RabbitMQ management API, on a
// node of its own with the management plugin (scripts/mgmtnode.sh:
// mgmt@localhost, AMQP 5696, HTTP 15696), started by the test and torn
// down after. The shared broker's plugins are never touched. The node runs
// from the suite's installation (scripts/node-lib.sh), so the test runs on
// every version the suite does: on 4.3 it reads the 4.3 management API.

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq-go/internal/testenv"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/ops"
	"github.com/acemq/acemq-go/topology"
)

func TestConsoleManagementDiscovery(t *testing.T) {
	ownNode(t, "mgmtnode.sh")
	testenv.NoLeaks(t) // after the node's cleanup is registered: checked before it runs

	b := testenv.Broker(t, mq.Config{URLs: []string{"amqp://guest:guest@127.0.0.1:5696/"}})
	ctx := testenv.Context(t, 30*time.Second)
	withDLQ, alsoDLQ, plain := testenv.Name(t, "a"), testenv.Name(t, "b"), testenv.Name(t, "plain")
	quorumDLQ := topology.DeadLetterQueue(testenv.Name(t, "q"))
	top := topology.New().Queue(withDLQ, topology.DeadLetter()).Queue(alsoDLQ, topology.DeadLetter()).Queue(plain).
		Queue(quorumDLQ, topology.Quorum())
	if err := b.Declare(ctx, top); err != nil {
		t.Fatal(err)
	}
	testenv.Publish(t, b, topology.DeadLetterQueue(withDLQ), mq.Message{Body: []byte("x")})
	testenv.Publish(t, b, quorumDLQ, mq.Message{Body: []byte("q")})

	srv := consoleServer(t, b, ops.ConsoleOptions{Management: "http://guest:guest@127.0.0.1:15696"})
	code, body := consoleGet(t, srv.URL+"/", "")
	if code != http.StatusOK {
		t.Fatalf("overview: %d\n%s", code, body)
	}
	for _, q := range []string{withDLQ, alsoDLQ} {
		if !strings.Contains(body, `<tr data-queue="`+q+`">`) {
			t.Errorf("the overview does not list %s:\n%s", q, body)
		}
	}
	if strings.Contains(body, plain) {
		t.Errorf("the overview lists %s, which has no .dlq or .parked", plain)
	}
	if !strings.Contains(body, `data-count="dlq">1</a>`) {
		t.Errorf("the overview does not count %s's dead letter:\n%s", withDLQ, body)
	}
	if strings.Contains(body, "guest:guest") || !strings.Contains(body, "guest:xxxxx@127.0.0.1:15696") {
		t.Errorf("the management URL is not shown redacted:\n%s", body)
	}

	// A quorum .dlq, as the API says: not looked at, even once.
	source := strings.TrimSuffix(quorumDLQ, topology.DeadLetterSuffix)
	if _, page := consoleGet(t, srv.URL+"/queues/"+source+"/dlq", ""); !strings.Contains(page, `id="quorum"`) {
		t.Errorf("the quorum .dlq's page has no warning:\n%s", page)
	}
	got := testenv.GetAll(t, b, quorumDLQ)
	if len(got) != 1 || got[0].Redelivered {
		t.Errorf("the quorum .dlq was looked at: %d messages, redelivered %v", len(got), len(got) == 1 && got[0].Redelivered)
	}
}
