// Package acemq_test holds the README's Go code, mirrored here so that it
// compiles (and, for the test and the example, runs) as written:
// TestREADMEIsMirrored fails when a README snippet is not found here
// verbatim.
package acemq_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"go.uber.org/fx"

	"github.com/acemq/acemq-go/fxmodule"
	"github.com/acemq/acemq-go/middleware"
	"github.com/acemq/acemq-go/ops"
	"github.com/acemq/acemq-go/retry"
	"github.com/acemq/acemq-go/topology"
	"github.com/acemq/acemq-go/typed"
)

// README: Handlers tested without a broker (its imports, then the test).
import (
	"testing"

	"github.com/acemq/acemq-go/fxmodule/fxmoduletest"
	"github.com/acemq/acemq-go/mq"
)

func TestShip(t *testing.T) {
	c := fxmoduletest.Consumer(t, shippingConsumer(), ordersTopology()) // the chain the app runs
	r := c.Deliver(mq.Message{Body: []byte(`{"id":"o-1"}`)})
	if r.Outcome != mq.OutcomeAck {
		t.Fatalf("got %v", r)
	}
}

// README: A service with fx.

// The retry policy is written once, here; the consumer runs it.
func ordersTopology() *topology.Topology {
	return topology.New().Exchange("orders-events").
		Queue("shipping.orders", topology.DeadLetter(), topology.Retry(retry.Exponential(6, 10*time.Second))).
		Binding("shipping.orders", "orders-events", "order.placed")
}

type Order struct {
	ID string `json:"id"`
}

// OrderEvents is the app's publisher to orders-events; a test fakes it.
type OrderEvents interface{ mq.Sender }

func ship(ctx context.Context, d *mq.Delivery, o Order) error {
	return nil // an error retries; middleware.Park(err) parks; middleware.Reject(err) dead-letters
}

// shippingConsumer is ship under middleware.Standard with the topology's policy for the queue.
func shippingConsumer() fxmodule.Consumer {
	return fxmodule.Consumer{Queue: "shipping.orders", Handler: typed.Handler(ship), Standard: true}
}

func main() {
	fx.New(
		fx.Supply(mq.Config{URLs: []string{"amqp://guest:guest@127.0.0.1:5672/"}}),
		fxmodule.Module,
		fxmodule.AsTopology(ordersTopology),
		fxmodule.AsConsumer(shippingConsumer),
		fxmodule.AsPublisher[OrderEvents]("orders-events"), // a topic exchange: an event nobody takes is no error
		fx.Invoke(serveHTTP),
	).Run()
}

// serveHTTP serves /readyz and POST /orders from a server the app starts and stops.
func serveHTTP(lc fx.Lifecycle, b *mq.Broker, events OrderEvents) {
	mux := http.NewServeMux()
	mux.Handle("GET /readyz", fxmodule.ReadyHandler(b)) // connected, not blocked, every consumer subscribed
	mux.HandleFunc("POST /orders", func(w http.ResponseWriter, r *http.Request) {
		if err := typed.Publish(r.Context(), events, "order.placed", Order{ID: r.FormValue("id")}); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
		}
	})
	srv := &http.Server{Addr: "127.0.0.1:8080", Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	lc.Append(fx.Hook{
		OnStart: func(context.Context) error {
			ln, err := net.Listen("tcp", srv.Addr)
			if err != nil {
				return err // the app does not start
			}
			go srv.Serve(ln) // returns http.ErrServerClosed at Shutdown
			return nil
		},
		OnStop: srv.Shutdown, // appended after the module's hooks, so it stops first
	})
}

var _ = main // compiled, not run: it would connect

// README: Without fx.

func handle(ctx context.Context, d *mq.Delivery) error { return nil }

func serve(ctx context.Context, body []byte) error {
	b := mq.New(mq.Config{URLs: []string{"amqp://guest:guest@127.0.0.1:5672/"}})
	if err := b.Start(ctx); err != nil {
		return err
	}
	defer b.Close(context.Background())

	policy := retry.Exponential(6, 10*time.Second)
	if err := b.Declare(ctx, topology.New().Queue("orders.new", topology.DeadLetter(), topology.Retry(policy))); err != nil {
		return err
	}
	// Standard's stack, with the policy the Broker declared for the queue.
	c, err := b.Consume(ctx, "orders.new", mq.HandlerFunc(handle), middleware.StandardDeclared())
	if err != nil {
		return err
	}
	defer c.Stop(context.Background())

	return b.Publisher("").Publish(ctx, "orders.new", mq.Message{Body: body}) // returns once confirmed
}

var _ = serve

// docs/console.md: the console, mounted on a service's admin server.
func mountConsole(ctx context.Context, broker *mq.Broker, admin *http.ServeMux) error {
	con, err := ops.NewConsole(broker, ops.ConsoleOptions{Queues: []string{"orders"}, BasePath: "/dlq"})
	if err != nil {
		return err
	}
	defer con.Close(ctx)
	admin.Handle("/dlq/", http.StripPrefix("/dlq", con))
	return nil
}

var _ = mountConsole

// README: Topology, printed before it is applied.
func Example_topology() {
	t := topology.New().
		Exchange("orders-events", topology.Topic).
		Queue("shipping.orders", topology.DeadLetter(), topology.Retry(retry.Exponential(6, 10*time.Second))).
		Binding("shipping.orders", "orders-events", "order.placed")
	fmt.Print(t)
	// Output:
	// Topology: 3 exchanges, 6 queues, 4 bindings
	//   declare exchange orders-events (topic, durable)
	//   declare exchange acemq.dlx (direct, durable)
	//   declare exchange acemq.retry (direct, durable)
	//   declare queue shipping.orders (durable, x-dead-letter-exchange='acemq.dlx', x-dead-letter-routing-key='shipping.orders.dlq', x-queue-type='quorum')
	//   declare queue shipping.orders.dlq (durable)
	//   declare queue shipping.orders.parked (durable)
	//   declare queue shipping.orders.retry.40s (durable, x-dead-letter-exchange='acemq.retry', x-dead-letter-routing-key='shipping.orders', x-message-ttl=40000)
	//   declare queue shipping.orders.retry.80s (durable, x-dead-letter-exchange='acemq.retry', x-dead-letter-routing-key='shipping.orders', x-message-ttl=80000)
	//   declare queue shipping.orders.retry.160s (durable, x-dead-letter-exchange='acemq.retry', x-dead-letter-routing-key='shipping.orders', x-message-ttl=160000)
	//   declare binding shipping.orders.dlq (from acemq.dlx on shipping.orders.dlq)
	//   declare binding shipping.orders.parked (from acemq.dlx on shipping.orders.parked)
	//   declare binding shipping.orders (from acemq.retry on shipping.orders)
	//   declare binding shipping.orders (from orders-events on order.placed)
}

// docs/recovery.md: a queue of this instance's own, declared again after a
// reconnect.
func Example_instanceQueue() {
	q := topology.InstanceQueue("billing.prices")
	t := topology.New().
		Exchange("prices", topology.Fanout).
		Queue(q, topology.Exclusive()).
		Binding(q, "prices", "")
	fmt.Println(strings.HasPrefix(q, "billing.prices."), strings.SplitN(t.String(), "\n", 2)[0])
	// Output:
	// true Topology: 1 exchanges, 1 queues, 1 bindings
}

// snippets returns the ```go blocks of a Markdown file, each as its
// non-empty lines with surrounding space trimmed.
func snippets(t *testing.T, path string) [][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out [][]string
	var cur []string
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case !in && strings.TrimSpace(line) == "```go":
			in, cur = true, nil
		case in && strings.TrimSpace(line) == "```":
			in = false
			out = append(out, cur)
		case in && strings.TrimSpace(line) != "":
			cur = append(cur, strings.TrimSpace(line))
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// mirrorOf names, for a Markdown file whose snippets live in other
// packages' examples, those files (a snippet may be in any of them);
// every other snippet is in this one.
var mirrorOf = map[string][]string{"docs/outbox.md": {"outbox/example_test.go", "outbox/outboxtest/doc_test.go", "outbox/outboxtest/doc_fx_test.go"}}

// TestREADMEIsMirrored: every Go snippet of the README and of the docs it
// links to is in example_test.go (or the file mirrorOf names), line for
// line, so their code compiles as written.
func TestREADMEIsMirrored(t *testing.T) {
	lines := func(path string) []string {
		src, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, l := range strings.Split(string(src), "\n") {
			if l = strings.TrimSpace(l); l != "" {
				out = append(out, l)
			}
		}
		return out
	}
	docs, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range append([]string{"README.md"}, docs...) {
		mirrors := []string{"example_test.go"}
		if m, ok := mirrorOf[path]; ok {
			mirrors = m
		}
		mirror := strings.Join(mirrors, " or ")
		var heres [][]string
		for _, m := range mirrors {
			heres = append(heres, lines(m))
		}
		blocks := snippets(t, path)
		if path == "README.md" && len(blocks) < 4 {
			t.Fatalf("found %d Go snippets in README.md, want at least 4", len(blocks))
		}
		for i, b := range blocks {
			if !slices.ContainsFunc(heres, func(here []string) bool { return containsRun(here, b) }) {
				t.Errorf("%s Go snippet %d (starting %q) is not mirrored verbatim in %s", path, i+1, b[0], mirror)
			}
		}
	}
}

func containsRun(hay, needle []string) bool {
	for i := 0; i+len(needle) <= len(hay); i++ {
		ok := true
		for j := range needle {
			if hay[i+j] != needle[j] {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}

// TestREADMEServesHTTPOnItsLifecycle: the README's fx service serves its
// HTTP handlers from a server the app's lifecycle starts and stops, as
// examples/service does; handlers registered on http.DefaultServeMux with
// no server started would serve nothing.
func TestREADMEServesHTTPOnItsLifecycle(t *testing.T) {
	found := false
	for i, b := range snippets(t, "README.md") {
		text := strings.Join(b, "\n")
		if !strings.Contains(text, "fx.New(") || !strings.Contains(text, "http.") {
			continue
		}
		found = true
		for _, bad := range []string{"http.Handle(", "http.HandleFunc(", "http.DefaultServeMux"} {
			if strings.Contains(text, bad) {
				t.Errorf("README Go snippet %d registers on http.DefaultServeMux (%s)", i+1, bad)
			}
		}
		for _, want := range []string{"fx.Lifecycle", "OnStart:", ".Serve(", "OnStop:"} {
			if !strings.Contains(text, want) {
				t.Errorf("README Go snippet %d starts no server on the app's lifecycle (no %s)", i+1, want)
			}
		}
	}
	if !found {
		t.Fatal("no README Go snippet builds an fx app serving HTTP")
	}
}
