//go:build cluster

// The cluster failover suite: run it with `make cluster-test`, which starts
// a three-node cluster (scripts/cluster.sh: c1, c2, c3@localhost on
// 127.0.0.1:5681-5683), runs the tests tagged cluster, and tears the
// cluster down. Each test takes down the node the client is connected to
// (an orderly stop_app, then a SIGKILL crash) while it publishes and
// consumes a quorum queue, counts every message, prints a FAILOVER line
// with the recovery times and the counts, and starts the node again.
// Its helpers start with cluster.

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acemq/acemq-go/internal/testenv"
	"github.com/acemq/acemq-go/middleware"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/retry"
	"github.com/acemq/acemq-go/topology"
)

// The cluster scripts/cluster.sh starts: node cN@localhost answers AMQP on
// 127.0.0.1:568N.
const clusterSize = 3

func clusterNode(i int) string { return fmt.Sprintf("c%d@localhost", i) }
func clusterPort(i int) int    { return 5680 + i }
func clusterURL(i int) string {
	return fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d/", clusterPort(i))
}

// clusterFirstAfter is the time of the first record with message msg
// logged after t (zero if none yet).
func clusterFirstAfter(lg *testenv.LogRecorder, msg string, t time.Time) time.Time {
	for _, r := range lg.All(msg) {
		if r.Time.After(t) {
			return r.Time
		}
	}
	return time.Time{}
}

// clusterCounts counts every message by id: published (Publish called),
// confirmed (Publish returned nil) and handled (the handler saw it).
type clusterCounts struct {
	mu          sync.Mutex
	published   int
	pubErrors   int
	lastPubErr  error
	confirmed   map[string]time.Time
	handled     map[string]int
	deliveries  int
	servers     map[string]int    // deliveries per host:port
	confirmedAt []time.Time       // every confirm's time, in order
	handledAt   []clusterDelivery // every delivery's time and server, in order
}

type clusterDelivery struct {
	at     time.Time
	server string
}

func newClusterCounts() *clusterCounts {
	return &clusterCounts{confirmed: map[string]time.Time{}, handled: map[string]int{}, servers: map[string]int{}}
}

func (c *clusterCounts) publish(id string, err error) {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.published++
	if err != nil {
		c.pubErrors++
		c.lastPubErr = err
		return
	}
	c.confirmed[id] = now
	c.confirmedAt = append(c.confirmedAt, now)
}

func (c *clusterCounts) handle(id, server string) {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.handled[id]++
	c.deliveries++
	c.servers[server]++
	c.handledAt = append(c.handledAt, clusterDelivery{now, server})
}

func (c *clusterCounts) snapshot() (published, confirmed, handled int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.published, len(c.confirmed), len(c.handled)
}

// firstConfirmAfter is the first confirm after t (zero if none yet).
func (c *clusterCounts) firstConfirmAfter(t time.Time) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, x := range c.confirmedAt {
		if x.After(t) {
			return x
		}
	}
	return time.Time{}
}

// firstDeliveryAfter is the first delivery after t that came on a
// connection other than to server (zero if none yet).
func (c *clusterCounts) firstDeliveryAfter(t time.Time, server string) (time.Time, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, d := range c.handledAt {
		if d.at.After(t) && d.server != server {
			return d.at, d.server
		}
	}
	return time.Time{}, ""
}

// lost lists the confirmed ids never handled; duplicates counts the
// deliveries beyond the first of each id.
func (c *clusterCounts) tally() (lost []string, duplicates int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for id := range c.confirmed {
		if c.handled[id] == 0 {
			lost = append(lost, id)
		}
	}
	for _, n := range c.handled {
		duplicates += n - 1
	}
	return lost, duplicates
}

// clusterConnectionNode asks the cluster which node holds the AMQP connection
// named name: the port it arrived on says which (cN listens on 568N).
func clusterConnectionNode(ctx context.Context, name string) (node string, port int, err error) {
	var lastErr error
	for i := 1; i <= clusterSize; i++ { // ask any node that answers
		out, err := testenv.Rabbitmqctl(ctx, clusterNode(i), "list_connections", "port", "client_properties", "--formatter", "json")
		if err != nil {
			lastErr = err
			continue
		}
		var rows []struct {
			Port             int   `json:"port"`
			ClientProperties []any `json:"client_properties"`
		}
		if err := json.Unmarshal([]byte(out), &rows); err != nil {
			return "", 0, fmt.Errorf("list_connections: %w in %q", err, out)
		}
		for _, r := range rows {
			if !strings.Contains(fmt.Sprint(r.ClientProperties), name) {
				continue
			}
			for j := 1; j <= clusterSize; j++ {
				if clusterPort(j) == r.Port {
					return clusterNode(j), r.Port, nil
				}
			}
			return "", 0, fmt.Errorf("list_connections: connection %q on port %d, no node of ours", name, r.Port)
		}
		return "", 0, fmt.Errorf("list_connections: no connection named %q", name)
	}
	return "", 0, lastErr
}

// clusterDiagnose logs what the surviving nodes and this process are doing:
// for a failover that does not recover.
func clusterDiagnose(t *testing.T, down string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for i := 1; i <= clusterSize; i++ {
		n := clusterNode(i)
		if n == down {
			continue
		}
		for _, args := range [][]string{
			{"list_queues", "name", "type", "leader", "members", "online", "messages_ready", "messages_unacknowledged", "consumers"},
			{"list_channels", "connection", "number", "confirm", "messages_unconfirmed", "messages_unacknowledged", "consumer_count"},
		} {
			out, err := testenv.Rabbitmqctl(ctx, n, args...)
			t.Logf("rabbitmqctl -n %s %s: %v\n%s", n, strings.Join(args, " "), err, out)
		}
		break // the view of one surviving node is enough
	}
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	t.Logf("goroutines of the test process:\n%s", buf)
}

// The ways a node goes down in these tests.
const (
	clusterStopApp = "stop_app" // rabbitmqctl stop_app: an orderly shutdown
	clusterKill    = "kill"     // SIGKILL of the node's VM: a crash
)

const clusterScript = "../scripts/cluster.sh"

// clusterScriptRun runs scripts/cluster.sh, bounded in time.
func clusterScriptRun(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, clusterScript, args...)
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", clusterScript, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// Stop (orderly) the node the client is connected to, while it publishes
// and consumes a quorum queue: the client moves to another node, and no
// confirmed message is lost.
func TestClusterFailoverStopApp(t *testing.T) { clusterFailover(t, clusterStopApp) }

// The same with a crash: the node's VM is killed with SIGKILL. Measured
// with RabbitMQ 3.10.8: a channel that first publishes to the quorum queue
// while its leader's node is dead (during the election) gets every later
// publish nacked, for good; a fresh channel gets through. A publisher that
// keeps such a channel never recovers, and this test says so.
func TestClusterFailoverKill(t *testing.T) { clusterFailover(t, clusterKill) }

func clusterFailover(t *testing.T, mode string) {
	// Registered first, so it runs last: after the broker is closed.
	testenv.NoLeaks(t)

	ctx := testenv.Context(t, 10*time.Minute)
	for i := 1; i <= clusterSize; i++ {
		if _, err := testenv.Rabbitmqctl(ctx, clusterNode(i), "await_startup", "--timeout", "60"); err != nil {
			t.Fatalf("cluster node %s is not up (run it through `make cluster-test`): %v", clusterNode(i), err)
		}
	}

	// The broker's records at Info and above go to the test log (the
	// per-delivery Debug records would drown it); the connection events'
	// times are read back from it.
	logs := testenv.NewLogRecorder(t)
	connName := testenv.Name(t, "conn")
	urls := make([]string, clusterSize)
	for i := range urls {
		urls[i] = clusterURL(i + 1)
	}
	b := mq.New(mq.Config{
		URLs:           urls,
		ConnectionName: connName,
		Heartbeat:      5 * time.Second,
		ReconnectMin:   50 * time.Millisecond,
		ReconnectMax:   time.Second,
		Logger:         logs.Logger(),
	})
	startCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := b.Start(startCtx); err != nil {
		t.Fatalf("connect to the cluster: %v", err)
	}
	closed := false
	closeBroker := func() {
		if closed {
			return
		}
		closed = true
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := b.Close(cctx); err != nil {
			t.Errorf("close broker: %v", err)
		}
	}
	t.Cleanup(closeBroker)

	// The node the client is connected to: the one this test stops.
	node, port, err := clusterConnectionNode(ctx, connName)
	if err != nil {
		t.Fatalf("which node holds the connection: %v", err)
	}
	oldServer := "127.0.0.1:" + strconv.Itoa(port)
	t.Logf("the client is connected to %s (%s)", node, oldServer)

	// The source queue is declared by the client, so its quorum leader is
	// on the node that will be stopped: the hard case, a leader election
	// during the failover.
	q := testenv.Name(t)
	policy := retry.Exponential(3, 50*time.Millisecond)
	source := topology.New().Queue(q)
	if qs, ok := source.QueueNamed(q); !ok || qs.Args["x-queue-type"] != "quorum" {
		t.Fatalf("the default queue is not a quorum queue: %v", qs.Args)
	}
	if err := b.Declare(ctx, source); err != nil {
		t.Fatalf("declare %s: %v", q, err)
	}
	t.Cleanup(func() {
		// On the cluster, through any node that is up; the cluster is torn
		// down afterwards anyway.
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cb := mq.New(mq.Config{URLs: urls, Logger: testenv.Discard()})
		if err := cb.Start(cctx); err != nil {
			t.Errorf("cleanup: %v", err)
			return
		}
		defer cb.Close(cctx)
		for _, name := range []string{q, topology.DeadLetterQueue(q), topology.ParkedQueue(q)} {
			if _, err := cb.DeleteQueue(cctx, name); err != nil {
				t.Errorf("cleanup: delete %s: %v", name, err)
			}
		}
	})

	// The failure half (<q>.dlq, <q>.parked: classic queues, by the
	// contract) is declared through another node, so it lives on a node
	// that stays up. Declared through the stopped node, it would be
	// unavailable while that node is down, and DeclareOnStart, which
	// redeclares it before every resubscribe, would be refused (404
	// NOT_FOUND "home node ... is down or inaccessible") until the node
	// came back: the consumer could not resume on the surviving nodes.
	var other int
	for i := 1; i <= clusterSize && other == 0; i++ {
		if clusterNode(i) != node {
			other = i
		}
	}
	admin := mq.New(mq.Config{URLs: []string{clusterURL(other)}, Logger: testenv.Discard()})
	if err := admin.Start(startCtx); err != nil {
		t.Fatalf("connect to %s: %v", clusterNode(other), err)
	}
	err = admin.Declare(ctx, topology.ForConsumer(q, policy))
	_ = admin.Close(ctx)
	if err != nil {
		t.Fatalf("declare the failure half of %s through %s: %v", q, clusterNode(other), err)
	}

	counts := newClusterCounts()
	handler := mq.HandlerFunc(func(ctx context.Context, d *mq.Delivery) error {
		counts.handle(d.MessageId, d.Server())
		return nil
	})
	cons, err := b.Consume(ctx, q, handler,
		middleware.Standard(policy),
		mq.WithConcurrency(4), mq.WithPrefetch(64))
	if err != nil {
		t.Fatalf("consume %s: %v", q, err)
	}

	// Publish continuously with confirms until told to stop.
	const publishers = 4
	pub := b.Publisher("")
	var (
		seq      atomic.Int64
		stopPub  = make(chan struct{})
		pubsDone sync.WaitGroup
	)
	for range publishers {
		pubsDone.Go(func() {
			for {
				select {
				case <-stopPub:
					return
				default:
				}
				id := "m-" + strconv.FormatInt(seq.Add(1), 10)
				pctx, cancel := context.WithTimeout(ctx, 60*time.Second)
				err := pub.Publish(pctx, q, mq.Message{MessageId: id, Body: []byte(id)})
				cancel()
				counts.publish(id, err)
				time.Sleep(2 * time.Millisecond) // a steady stream, not a flood
			}
		})
	}
	stopPublishing := sync.OnceFunc(func() { close(stopPub); pubsDone.Wait() })
	t.Cleanup(stopPublishing)

	// Steady state first.
	testenv.Eventually(t, 30*time.Second, func() bool {
		_, c, h := counts.snapshot()
		return c >= 200 && h >= 200
	}, "publishing and consuming do not get going on the cluster")
	time.Sleep(2 * time.Second)
	if n, _, err := clusterConnectionNode(ctx, connName); err != nil || n != node {
		t.Fatalf("the client is no longer connected to %s before the stop: %s, %v", node, n, err)
	}
	pubBefore, confBefore, handledBefore := counts.snapshot()

	// Stop the node the client is connected to.
	restarted := false
	restart := func() {
		if restarted {
			return
		}
		restarted = true
		// start_app after a stop_app, a new VM after a kill; either
		// way, wait until the node runs in the cluster again.
		start := time.Now()
		if _, err := clusterScriptRun(context.Background(), "start", strings.TrimSuffix(node, "@localhost")); err != nil {
			t.Errorf("restart %s: %v", node, err)
			return
		}
		t.Logf("%s restarted in %v", node, time.Since(start).Round(100*time.Millisecond))
	}
	t.Cleanup(restart)
	stoppedAt := time.Now()
	switch mode {
	case clusterStopApp:
		_, err = testenv.Rabbitmqctl(ctx, node, "stop_app")
	case clusterKill:
		_, err = clusterScriptRun(ctx, "kill", strings.TrimSuffix(node, "@localhost"))
	default:
		t.Fatalf("unknown mode %q", mode)
	}
	if err != nil {
		t.Fatalf("%s %s: %v", mode, node, err)
	}
	stopTook := time.Since(stoppedAt)
	t.Logf("%s %s took %v", mode, node, stopTook.Round(time.Millisecond))

	// The client moves to another node; publishing and consuming resume.
	var lostAt, restoredAt, confirmAt, deliverAt time.Time
	var newServer string
	for recovered := false; !recovered; {
		lostAt = clusterFirstAfter(logs, mq.EventConnectionLost, stoppedAt)
		restoredAt = clusterFirstAfter(logs, mq.EventConnectionRestored, stoppedAt)
		if !restoredAt.IsZero() {
			confirmAt = counts.firstConfirmAfter(restoredAt)
			deliverAt, newServer = counts.firstDeliveryAfter(restoredAt, oldServer)
		}
		recovered = !confirmAt.IsZero() && !deliverAt.IsZero()
		if !recovered && time.Since(stoppedAt) > 90*time.Second {
			clusterDiagnose(t, node)
			counts.mu.Lock()
			t.Logf("publishes: %d, failed: %d, last error: %v", counts.published, counts.pubErrors, counts.lastPubErr)
			counts.mu.Unlock()
			fresh := b.Publisher("")
			fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			t.Logf("a publish on a fresh channel: %v", fresh.Publish(fctx, q, mq.Message{MessageId: "fresh", Body: []byte("fresh")}))
			cancel()
			fresh.Close()
			t.Fatalf("no recovery within 90s of stopping %s: connection lost=%v, %s=%v, a confirm after it=%v, a delivery from another node=%v",
				node, !lostAt.IsZero(), mq.EventConnectionRestored, !restoredAt.IsZero(), !confirmAt.IsZero(), !deliverAt.IsZero())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if newNode, _, err := clusterConnectionNode(ctx, connName); err != nil {
		t.Errorf("which node holds the connection after failover: %v", err)
	} else if newNode == node {
		t.Errorf("the client is still connected to %s, the node that was stopped", node)
	} else {
		t.Logf("the client moved to %s (%s)", newNode, newServer)
	}

	// Keep going on the new node for a while, then stop publishing and let
	// the consumer catch up with every confirmed message.
	time.Sleep(3 * time.Second)
	stopPublishing()
	var lost []string
	deadline := time.Now().Add(90 * time.Second)
	for {
		lost, _ = counts.tally()
		if len(lost) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(time.Second) // late redeliveries count as duplicates
	if err := cons.Stop(ctx); err != nil {
		t.Errorf("stop consumer: %v", err)
	}
	lost, duplicates := counts.tally()

	counts.mu.Lock()
	published, confirmed, handled, deliveries := counts.published, len(counts.confirmed), len(counts.handled), counts.deliveries
	pubErrors, lastPubErr := counts.pubErrors, counts.lastPubErr
	servers := fmt.Sprint(counts.servers)
	counts.mu.Unlock()
	since := func(x time.Time) string {
		if x.IsZero() {
			return "n/a"
		}
		return x.Sub(stoppedAt).Round(10 * time.Millisecond).String()
	}
	t.Logf("before the stop: published=%d confirmed=%d handled=%d; deliveries by server: %s", pubBefore, confBefore, handledBefore, servers)
	if pubErrors > 0 {
		t.Logf("publishes that failed (not confirmed, not counted as lost): %d, last: %v", pubErrors, lastPubErr)
	}
	line := fmt.Sprintf("FAILOVER (%s): %s (%s) at t=0 (the command took %v); connection lost %s, reconnect %s (to %s), first publish confirmed %s, first delivery %s; published=%d, confirmed=%d, handled=%d, deliveries=%d, duplicates=%d, lost=%d",
		mode, node, oldServer, stopTook.Round(10*time.Millisecond), since(lostAt), since(restoredAt), newServer,
		since(confirmAt), since(deliverAt), published, confirmed, handled, deliveries, duplicates, len(lost))
	fmt.Println(line) // a line of its own, without the test log's prefix, to grep for

	if len(lost) > 0 {
		show := lost
		if len(show) > 20 {
			show = show[:20]
		}
		t.Errorf("%d confirmed messages were never handled, e.g. %v", len(lost), show)
	}
	if c := counts.firstConfirmAfter(stoppedAt); c.IsZero() {
		t.Errorf("no publish was confirmed after the stop")
	}

	closeBroker()
	restart()
}
