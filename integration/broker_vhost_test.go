//go:build integration

package integration

// A vhost whose default queue type is quorum (`rabbitmqctl add_vhost
// --default-queue-type quorum`): the contract declares the library's
// classic queues (.dlq, .parked, the retry rungs; a queue given Classic())
// by leaving x-queue-type off, so there the broker's default decides what
// they become. docs/contract.md, "Queues in a vhost whose default type is
// quorum", says what the library does about it; this test keeps it true.

import (
	"context"
	"encoding/json"
	"errors"
	neturl "net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq-go/internal/testenv"
	"github.com/acemq/acemq-go/middleware"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/retry"
	"github.com/acemq/acemq-go/topology"
)

// quorumVhost adds a goit.* vhost whose default queue type is quorum, lets
// guest use it, and deletes it (and every queue in it) when the test ends.
// It returns the vhost and the suite's URL pointed at it.
func quorumVhost(t *testing.T) (string, string) {
	t.Helper()
	ctx := testenv.Context(t, 3*time.Minute)
	vhost := testenv.Name(t)
	if _, err := testenv.Rabbitmqctl(ctx, "", "add_vhost", vhost, "--default-queue-type", "quorum"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := testenv.Rabbitmqctl(testenv.Context(t, time.Minute), "", "delete_vhost", vhost); err != nil {
			t.Errorf("delete vhost %s: %v", vhost, err)
		}
	})
	if _, err := testenv.Rabbitmqctl(ctx, "", "set_permissions", "-p", vhost, "guest", ".*", ".*", ".*"); err != nil {
		t.Fatal(err)
	}
	u, err := neturl.Parse(testenv.URL())
	if err != nil {
		t.Fatal(err)
	}
	u.Path, u.RawPath = "/"+vhost, "/"+neturl.PathEscape(vhost)
	return vhost, u.String()
}

// queueTypes lists the queues of vhost with their type, as the broker
// stores them.
func queueTypes(t *testing.T, vhost string) map[string]string {
	t.Helper()
	out, err := testenv.Rabbitmqctl(testenv.Context(t, time.Minute), "", "list_queues", "-p", vhost, "name", "type", "--formatter", "json")
	if err != nil {
		t.Fatal(err)
	}
	var rows []struct{ Name, Type string }
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("list_queues: %v\n%s", err, out)
	}
	m := map[string]string{}
	for _, r := range rows {
		m[r.Name] = r.Type
	}
	return m
}

// In a quorum-default vhost the library's classic-by-omission queues are
// quorum queues, on every version here; the exclusive queue stays classic.
// The plan says exactly what is sent (no x-queue-type on them, so no claim
// of a type the broker then changes), and the failure half works on them:
// a broker rung (a quorum queue with a message TTL) brings a retry home, a
// parked message and an exhausted one arrive in .parked and .dlq.
func TestBrokerQuorumDefaultVhost(t *testing.T) {
	t.Parallel()
	vhost, url := quorumVhost(t)
	b, lg := consBroker(t, url)
	p := retry.Waits(time.Second).With(retry.InProcessLimit(0)) // one broker rung of 1 s
	q, named, excl := "goit.vhost.q", "goit.vhost.named-classic", "goit.vhost.exclusive"
	top := topology.New().Queue(q, topology.Retry(p), topology.DeadLetter()).
		Queue(named, topology.Classic()).Queue(excl, topology.Exclusive())
	ctx := testenv.Context(t, 30*time.Second)
	if err := b.Declare(ctx, top); err != nil {
		t.Fatal(err)
	}
	plan, err := top.Plan()
	if err != nil {
		t.Fatal(err)
	}
	byOmission := []string{topology.DeadLetterQueue(q), topology.ParkedQueue(q), topology.RungQueue(q, time.Second), named}
	for _, a := range plan {
		if a.Kind == topology.DeclareQueue && slices.Contains(byOmission, a.Name) && strings.Contains(a.Detail, topology.ArgQueueType) {
			t.Errorf("the plan names a queue type for %s: %s", a.Name, a)
		}
	}
	types := queueTypes(t, vhost)
	want := map[string]string{q: "quorum", excl: "classic"}
	for _, n := range byOmission {
		want[n] = "quorum" // the vhost's default, not the contract's classic
	}
	for n, w := range want {
		if types[n] != w {
			t.Errorf("RabbitMQ %v, quorum-default vhost: %s is a %q queue, want %q", testenv.BrokerVersion(t), n, types[n], w)
		}
	}

	var calls consCalls
	c, err := b.Consume(ctx, q, mq.HandlerFunc(func(_ context.Context, d *mq.Delivery) error {
		calls.add(d)
		if d.MessageId == "park" {
			return middleware.Park(errors.New("a person must look"))
		}
		return errors.New("fails every time")
	}), middleware.Standard(p))
	if err != nil {
		t.Fatal(err)
	}
	defer testenv.Stop(t, c)
	testenv.Publish(t, b, q, mq.Message{MessageId: "exhausted", Body: []byte("x")}, mq.Message{MessageId: "park", Body: []byte("x")})
	testenv.WaitCount(t, b, topology.DeadLetterQueue(q), 1, 30*time.Second)
	testenv.WaitCount(t, b, topology.ParkedQueue(q), 1, 10*time.Second)
	if n := calls.n(); n != 3 {
		t.Errorf("%d calls, want 3: the exhausted message twice (once more after its 1 s rung), the parked one once", n)
	}
	if recs := lg.All(mq.EventSetAsideFailed); len(recs) != 0 {
		t.Errorf("%d set-asides failed on quorum .dlq/.parked", len(recs))
	}
}

// Two things 4.x deprecated: a transient (non-durable) queue that is not
// exclusive, and global QoS (basic.qos global=true). Both are deprecated
// features that a 4.x broker still permits in its default configuration
// (an operator can turn them off with deprecated_features.permit.* =
// false); measured on 3.10.8, 4.0.5 and 4.3.6 as Debian installs them,
// every one accepts both. The library relies on neither: it declares a
// transient queue exclusive in every vector it puts on the broker, and
// Consume's QoS is per consumer.
func TestBrokerTransientQueuesAndGlobalQoS(t *testing.T) {
	t.Parallel()
	v := testenv.BrokerVersion(t)
	b := testenv.Broker(t, mq.Config{Logger: testenv.Discard()})
	q := testenv.Name(t)
	testenv.Cleanup(t, q)
	ctx := testenv.Context(t, 20*time.Second)
	ch, err := b.Channel(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, err = ch.QueueDeclare(q, false, false, false, false, nil)
	ch.Close()
	if err != nil {
		t.Errorf("RabbitMQ %v (default configuration): transient non-exclusive queue refused: %v", v, err)
	}
	ch, err = b.Channel(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	err = ch.Qos(10, 0, true)
	if err != nil {
		t.Errorf("RabbitMQ %v (default configuration): global QoS refused: %v", v, err)
	}
	t.Logf("RabbitMQ %v: global QoS: %v", v, err)
}
