//go:build chaos

package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq-go/internal/testenv"
	"github.com/acemq/acemq-go/mq"
)

// Field seed 1063112964 (CI, RabbitMQ 4.3): two orders of a key took
// effect after a later order of that key, each from a copy never
// delivered before, at the heal of isolate-clients f3 (24 s). In the
// replay both relays and the inbox consumer reached the cluster through
// f3, gave their connections up after 15 s, and the relays sent their
// rows again elsewhere, in order. A socket closed the usual way keeps
// trying to deliver what it holds, so what the relays had written to the
// sockets they gave up could reach f3 at the heal and be queued behind
// the later order: the library had stopped caring about those bytes, the
// kernel had not.
//
// The test cuts one connection of the suite's broker (its client port
// only, with nftables tables of its own), publishes (no confirm comes),
// closes the Broker with a context that ends (it gives the connection
// up), then lets the client-to-broker direction through again while the
// broker's replies still go nowhere. The broker must receive nothing from
// the connection the client gave up.
func TestChaosAbandonedConnectionSendsNothingLater(t *testing.T) {
	testenv.NoLeaks(t)
	abandonedSendsNothingLater(t, testenv.URL(), "abandoned", "")
}

// Field seed 2014027197 (issue 40, durable rungs): reordered=2 after
// isolate-clients f3, with the socket reset above in place. The field's
// clients reach each node through a TCP proxy, as clients often reach a
// broker (a load balancer): the proxy's kernel acknowledged every byte the
// relays wrote, so the relays' sockets held nothing unacknowledged when
// they gave their connections up after 15 s, closed them with a FIN, and
// the proxy, told only that the stream had ended, delivered what it held
// for f3 once the cut healed: f3 took the two publishes 3.7 s after the
// heal ("Channel is stopping with 2 pending publisher confirms") and the
// orders took effect behind later orders of their keys.
//
// The test is the one above behind a proxy (internal/tcpproxy, which
// passes a reset on as a reset and an end as an end): it cuts the proxy's
// connection to the broker, publishes, gives the connection up, and lets
// the proxy's side through again. The broker must receive nothing.
func TestChaosAbandonedConnectionBehindAProxySendsNothingLater(t *testing.T) {
	testenv.NoLeaks(t)
	_, url := testenv.Proxy(t)
	// The port cut below is then the proxy's towards the broker.
	abandonedSendsNothingLater(t, url, "abandoned-proxied", ", through the proxy,")
}

// abandonedSendsNothingLater is the two tests above: a Broker on url
// publishes into a cut of its connection's port towards the suite's
// broker, gives the connection up (Close's context ends), and the path
// towards the broker is let through again while the broker's replies
// still go nowhere. via names the path in the failure ("" when direct).
func abandonedSendsNothingLater(t *testing.T, url, label, via string) {
	ctx := testenv.Context(t, 2*time.Minute)
	direct := testenv.Broker(t, mq.Config{})
	q := coreQueue(t, direct, nil)

	name := testenv.Name(t, label)
	b := mq.New(mq.Config{URLs: []string{url}, ConnectionName: name, Logger: testenv.Logger(t)})
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	pub := b.Publisher("")
	if err := pub.Publish(ctx, q, mq.Message{Body: []byte("warm")}); err != nil {
		t.Fatal(err)
	}
	testenv.WaitCount(t, direct, q, 1, 10*time.Second)
	port := chaosPeerPort(t, ctx, name)

	toBroker := nftDrop(t, "up", fmt.Sprintf("tcp sport %d drop", port))
	toClient := nftDrop(t, "down", fmt.Sprintf("tcp dport %d drop", port))
	pctx, cancel := context.WithTimeout(ctx, time.Second)
	err := pub.Publish(pctx, q, mq.Message{Body: []byte("given up")})
	cancel()
	if err == nil {
		t.Fatal("a publish through a cut connection was confirmed")
	}
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	_ = b.Close(cctx) // ends with cctx: the client gives the connection up
	cancel()

	// The client's side of the path is open again; the broker's replies
	// (a heartbeat, a reset) still go nowhere, so nothing but what the
	// client's socket (or the proxy) still holds can reach the broker. A
	// kernel resends within about twice the time it has been trying
	// (exponential backoff from 200 ms): 10 s covers the 2 s it has tried.
	toBroker()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if n := testenv.Count(t, direct, q); n != 1 {
			t.Fatalf("%d messages in the queue, want 1: the broker received%s a publish from a connection its client had given up, after the client said it failed", n, via)
		}
		time.Sleep(200 * time.Millisecond)
	}
	toClient()
	// The broker learns of the end (a reset) and drops the connection.
	testenv.Eventually(t, 60*time.Second, func() bool {
		return chaosPeerPorts(t, ctx, name) == nil
	}, "the broker still holds the connection the client gave up")
	if n := testenv.Count(t, direct, q); n != 1 {
		t.Fatalf("%d messages in the queue once the broker dropped the connection, want 1", n)
	}
}

// chaosPeerPort is the client port of the one connection to the shared
// broker named name.
func chaosPeerPort(t *testing.T, ctx context.Context, name string) int {
	t.Helper()
	ports := chaosPeerPorts(t, ctx, name)
	if len(ports) != 1 {
		t.Fatalf("connections named %s from ports %v, want one", name, ports)
	}
	return ports[0]
}

// chaosPeerPorts lists the client ports of the shared broker's
// connections named name.
func chaosPeerPorts(t *testing.T, ctx context.Context, name string) []int {
	t.Helper()
	var ports []int
	for _, p := range chaosConnections(t, ctx, name, "peer_port") {
		n, err := strconv.Atoi(p)
		if err != nil {
			t.Fatalf("list connections: port %q: %v", p, err)
		}
		ports = append(ports, n)
	}
	return ports
}

// nftDrop drops, on this machine's output path, the packets rule matches,
// in an nftables table of its own (inet acemq_chaos_<pid>_<which>), and
// returns what deletes it again (also done at the test's end). It needs
// root and nft (Debian: nftables; `make chaos` installs it).
func nftDrop(t *testing.T, which, rule string) (heal func()) {
	t.Helper()
	if _, err := exec.LookPath("nft"); err != nil {
		t.Fatalf("nft: %v (install nftables; make chaos does)", err)
	}
	table := fmt.Sprintf("acemq_chaos_%d_%s", os.Getpid(), which)
	script := fmt.Sprintf("table inet %s {\n chain out {\n  type filter hook output priority 0; policy accept;\n  %s\n }\n}\n", table, rule)
	cmd := exec.Command("nft", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nft: %v: %s (the test needs root)", err, out)
	}
	done := false
	heal = func() {
		if done {
			return
		}
		done = true
		if out, err := exec.Command("nft", "delete", "table", "inet", table).CombinedOutput(); err != nil {
			t.Errorf("nft delete table %s: %v: %s", table, err, out)
		}
	}
	t.Cleanup(heal)
	return heal
}
