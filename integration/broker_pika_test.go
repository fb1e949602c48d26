//go:build integration

package integration

// Two services on one quorum-default vhost, one Go, one Python (pika, the
// client the Python member uses), each declaring what the contract's
// vectors say: docs/contract.md, "Queues in a vhost whose default type is
// quorum", decides that neither library adds anything for such a vhost, so
// whichever declares first, the other's declarations are equivalent on the
// broker, and what one sets aside the other reads. The Python side is
// integration/testdata/pika_peer.py, run with Debian's python3-pika (`make
// pika` installs it).

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq-go/internal/conformance"
	"github.com/acemq/acemq-go/internal/testenv"
	"github.com/acemq/acemq-go/middleware"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/topology"
)

// pikaPython is a Python that imports pika: $PIKA_PYTHON, else Debian's
// /usr/bin/python3 (where python3-pika installs), else python3 on PATH.
func pikaPython(t *testing.T) string {
	t.Helper()
	var tried []string
	for _, py := range []string{os.Getenv("PIKA_PYTHON"), "/usr/bin/python3", "python3"} {
		if py == "" {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		out, err := exec.CommandContext(ctx, py, "-c", "import pika; print(pika.__version__)").CombinedOutput()
		cancel()
		if err == nil {
			t.Logf("pika %s (%s)", strings.TrimSpace(string(out)), py)
			return py
		}
		tried = append(tried, fmt.Sprintf("%s: %v", py, err))
	}
	t.Fatalf("no Python here imports pika (make pika installs Debian's python3-pika): %s", strings.Join(tried, "; "))
	return ""
}

// pikaPeer runs one pika_peer.py command and decodes the JSON it prints.
// exit is its exit status (0, or 3 for a refused declaration).
func pikaPeer(t *testing.T, py string, args ...string) (out map[string]any, exit int) {
	t.Helper()
	ctx := testenv.Context(t, 90*time.Second)
	cmd := exec.CommandContext(ctx, py, append([]string{filepath.Join("testdata", "pika_peer.py")}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee) && (ee.ExitCode() == 3 || ee.ExitCode() == 4):
		exit = ee.ExitCode()
	default:
		t.Fatalf("pika_peer.py %s: %v\nstdout: %s\nstderr: %s", args[0], err, stdout.String(), stderr.String())
	}
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		t.Fatalf("pika_peer.py %s printed %q: %v (stderr: %s)", args[0], stdout.String(), err, stderr.String())
	}
	return out, exit
}

// pikaSpec is what pika_peer.py declares: the contract's two exchanges and
// the queues of every broker vector, renamed as the Go side declares them.
type pikaSpec struct {
	Exchanges []pikaExchange          `json:"exchanges"`
	Queues    []conformance.QueueSpec `json:"queues"`
}

type pikaExchange struct {
	Name    string `json:"name"`
	Kind    string `json:"kind"`
	Durable bool   `json:"durable"`
}

// vhostVectors is every broker vector of topologies.json renamed under
// v<i>., as one Go topology and as the pika side's spec. Exclusive queues
// stay out of the spec: one connection owns each, so a second service
// declaring it is refused by design (RESOURCE_LOCKED), in any vhost. A
// vector with a classic-only argument (x-max-priority) on a queue left
// classic by omission is returned apart, in classicOnly: such a queue is a
// quorum queue in this vhost, and the broker refuses the argument.
func vhostVectors(t *testing.T) (goTop *topology.Topology, spec pikaSpec, classicOnly map[string]*topology.Topology) {
	t.Helper()
	var v conformance.Topologies
	if err := conformance.Load("topologies.json", &v); err != nil {
		t.Fatal(err)
	}
	goTop, classicOnly = topology.New(), map[string]*topology.Topology{}
	spec = pikaSpec{Exchanges: []pikaExchange{
		{Name: topology.DeadLetterExchange, Kind: "direct", Durable: true},
		{Name: topology.RetryExchange, Kind: "direct", Durable: true},
	}}
vectors:
	for i, tv := range v.Topologies {
		if !tv.OnBroker() {
			continue
		}
		tv := conformanceRenamed(tv, fmt.Sprintf("v%d.", i))
		tp, err := conformance.Build(tv.Calls)
		if err != nil {
			t.Fatalf("%s: %v", tv.Name, err)
		}
		for _, q := range tv.Queues {
			_, typed := q.Arguments[topology.ArgQueueType]
			_, priority := q.Arguments["x-max-priority"]
			if priority && !typed && !q.Exclusive && !q.AutoDelete && q.Durable {
				classicOnly[q.Name] = tp
				continue vectors
			}
		}
		for _, c := range tv.Calls {
			if c.Call == "consumer" { // its queue is somebody else's: declared classic by omission, as the contract's plainest queue
				goTop.Queue(c.Queue, topology.Classic())
				spec.Queues = append(spec.Queues, conformance.QueueSpec{Name: c.Queue, Durable: true, Arguments: map[string]conformance.Typed{}})
			}
		}
		goTop = goTop.Merge(tp)
		for _, q := range tv.Queues {
			if !q.Exclusive {
				spec.Queues = append(spec.Queues, q)
			}
		}
	}
	if len(classicOnly) == 0 {
		t.Fatal("no vector has a priority queue classic by omission; the test of its refusal checks nothing")
	}
	return goTop, spec, classicOnly
}

// In a quorum-default vhost a Go service and a pika service declare the
// contract's vectors, in either order, and neither is refused: the broker
// holds the same queues of the same types whichever came first. Then a
// message the pika service publishes, the Go consumer parks, and the pika
// service reads it from .parked with the contract's headers.
func TestBrokerQuorumDefaultVhostGoAndPikaAgree(t *testing.T) {
	t.Parallel()
	py := pikaPython(t)
	goTop, spec, classicOnly := vhostVectors(t)
	specFile := filepath.Join(t.TempDir(), "spec.json")
	raw, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(specFile, raw, 0o644); err != nil {
		t.Fatal(err)
	}

	types := map[string]map[string]string{}
	for _, order := range []string{"go first", "pika first"} {
		vhost, url := quorumVhost(t)
		b, _ := consBroker(t, url)
		ctx := testenv.Context(t, 60*time.Second)
		goDeclare := func() {
			if err := b.Declare(ctx, goTop); err != nil {
				t.Errorf("%s: the Go service's Declare: %v", order, err)
			}
		}
		pikaDeclare := func() {
			out, exit := pikaPeer(t, py, "declare", url, specFile)
			if exit != 0 {
				t.Errorf("%s: the pika service's declaration of %v was refused: %v", order, out["refused"], out["error"])
				return
			}
			checkUnsendable(t, spec, out["unsendable"])
		}
		if order == "go first" {
			goDeclare()
			pikaDeclare()
		} else {
			pikaDeclare()
			goDeclare()
		}
		types[order] = queueTypes(t, vhost)
		if len(types[order]) < len(spec.Queues) {
			t.Errorf("%s: %d queues on the broker, the spec alone has %d", order, len(types[order]), len(spec.Queues))
		}
		if order == "go first" {
			pikaParkedByGo(t, py, b, url)
			for q, tp := range classicOnly {
				err := b.Declare(ctx, tp)
				if !errors.Is(err, mq.ErrPreconditionFailed) || !strings.Contains(err.Error(), "x-max-priority") {
					t.Errorf("RabbitMQ %v, quorum-default vhost: Declare of %s, classic by omission with x-max-priority: %v; want the broker's refusal of x-max-priority", testenv.BrokerVersion(t), q, err)
				}
			}
		}
	}
	if !maps.Equal(types["go first"], types["pika first"]) {
		t.Errorf("the broker holds different queues depending on who declared first:\ngo first:   %v\npika first: %v", types["go first"], types["pika first"])
	}
	quorum := 0
	for _, ty := range types["go first"] {
		if ty == "quorum" {
			quorum++
		}
	}
	t.Logf("RabbitMQ %v: %d queues, %d of them quorum, the same whichever service declared first", testenv.BrokerVersion(t), len(types["go first"]), quorum)
}

// checkUnsendable: the queues pika_peer.py left out must be exactly those
// of the spec with a float argument (pika 1.2's table encoder has no
// float), and it declared every other one.
func checkUnsendable(t *testing.T, spec pikaSpec, got any) {
	t.Helper()
	raw, _ := json.Marshal(got)
	var left []struct {
		Queue     string   `json:"queue"`
		Arguments []string `json:"arguments"`
	}
	if err := json.Unmarshal(raw, &left); err != nil {
		t.Fatalf("unsendable %s: %v", raw, err)
	}
	var want []string
	for _, q := range spec.Queues {
		for _, a := range q.Arguments {
			if ty := conformance.TypeName(a); ty == "float" || ty == "double" {
				want = append(want, q.Name)
				break
			}
		}
	}
	var names []string
	for _, l := range left {
		names = append(names, l.Queue)
	}
	if !slices.Equal(names, want) {
		t.Errorf("pika left out %v, want exactly the queues with a float argument %v", names, want)
	}
	if len(left) > 0 {
		t.Logf("pika cannot send a float in a field table: it left out %v", left)
	}
}

// pikaParkedByGo: pika publishes to the contract example's queue (v0.),
// the Go consumer parks it, pika takes it from .parked.
func pikaParkedByGo(t *testing.T, py string, b *mq.Broker, url string) {
	t.Helper()
	var v conformance.Topologies
	if err := conformance.Load("topologies.json", &v); err != nil {
		t.Fatal(err)
	}
	var call conformance.Call
	for _, c := range v.Topologies[0].Calls {
		if c.Call == "queue" && c.Retry != nil {
			call = c
		}
	}
	if call.Retry == nil {
		t.Fatalf("topologies.json's first vector (%q) has no queue with a retry policy", v.Topologies[0].Name)
	}
	p, err := call.Retry.Policy()
	if err != nil {
		t.Fatal(err)
	}
	q := "v0." + call.Name
	ctx := testenv.Context(t, 60*time.Second)
	var calls consCalls
	c, err := b.Consume(ctx, q, mq.HandlerFunc(func(_ context.Context, d *mq.Delivery) error {
		calls.add(d)
		return middleware.Park(errors.New("needs a person"))
	}), middleware.Standard(p))
	if err != nil {
		t.Fatal(err)
	}
	defer testenv.Stop(t, c)
	pikaPeer(t, py, "publish", url, q, "from-pika", "hello from python")
	got, exit := pikaPeer(t, py, "take", url, topology.ParkedQueue(q), "30")
	if exit != 0 {
		t.Fatalf("pika found nothing in %s within 30 s; the Go consumer was called %d times", topology.ParkedQueue(q), calls.n())
	}
	if got["message_id"] != "from-pika" || got["body"] != "hello from python" {
		t.Errorf("pika took %v %q from .parked, want from-pika %q", got["message_id"], got["body"], "hello from python")
	}
	h, _ := got["headers"].(map[string]any)
	want := map[string]string{
		"x-acemq-reason":       "parked",
		"x-acemq-source-queue": q,
		"x-acemq-error":        "needs a person",
	}
	for k, w := range want {
		pair, _ := h[k].([]any)
		if len(pair) != 2 || fmt.Sprint(pair[1]) != w {
			t.Errorf("pika reads %s = %v on the parked copy, want %q", k, h[k], w)
		}
	}
	// The copy carries the attempt after the one that failed (hops.json).
	if pair, _ := h["x-acemq-attempt"].([]any); len(pair) != 2 || pair[0] != "int" || fmt.Sprint(pair[1]) != "2" {
		t.Errorf("pika reads x-acemq-attempt = %v, want the int 2", h["x-acemq-attempt"])
	}
	if pair, _ := h["x-acemq-failed-at"].([]any); len(pair) != 2 || pair[0] != "datetime" {
		t.Errorf("pika reads x-acemq-failed-at = %v, want a timestamp", h["x-acemq-failed-at"])
	}
	if n := calls.n(); n != 1 {
		t.Errorf("the Go handler ran %d times, want 1 (a park is never retried)", n)
	}
}
