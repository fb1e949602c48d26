//go:build field

// What RabbitMQ 4.3 does in a partition, and what a plain AMQP client sees,
// measured on the field of issue 30 (scripts/field.sh: f1-f3@127.0.0.21-23,
// net_ticktime 10 s). Run it with `make field-facts`, which brings a field
// of its own up first (FIELD_INSTANCE=1, beside `make field`'s) and takes it
// down after; without the field it fails.
//
// Each scenario declares fresh quorum queues with their leaders on chosen
// nodes (x-queue-leader-locator client-local on a connection to that node),
// starts probes (publishers waiting for each confirm in turn, consumers,
// declarations on each side), cuts, holds the cut 40 s, heals, and prints
// one FIELDFACT line per probe with times relative to the cut. The numbers
// go into docs/reliability.md's Field section. The probes use amqp091-go
// directly: this is the broker's behaviour, not the library's.
// Its helpers start with fnet.

package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

const (
	fnetScript = "../scripts/field.sh"
	fnetHold   = 40 * time.Second // how long each cut lasts
	fnetAfter  = 30 * time.Second // how long the probes run after the heal
)

// fnetURL: the field's AMQP URL of each node (field.sh urls), filled by
// fnetURLs; FIELD_INSTANCE in the environment picks the field.
var fnetURL = map[string]string{}

func fnetURLs(t *testing.T) {
	t.Helper()
	out, err := fnetSh(t, 30*time.Second, "urls")
	us := strings.Split(out, ",")
	if err != nil || len(us) != 3 {
		t.Fatalf("field.sh urls: %q, %v", out, err)
	}
	for i, u := range us {
		fnetURL[fmt.Sprintf("f%d", i+1)] = u
	}
}

func fnetSh(t *testing.T, timeout time.Duration, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, fnetScript, args...).Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			err = fmt.Errorf("%w: %s", err, strings.TrimSpace(string(ee.Stderr)))
		}
	}
	return strings.TrimSpace(string(out)), err
}

func fnetDial(t *testing.T, node string, heartbeat time.Duration) *amqp.Connection {
	t.Helper()
	c, err := amqp.DialConfig(fnetURL[node], amqp.Config{Heartbeat: heartbeat, Dial: amqp.DefaultDial(10 * time.Second)})
	if err != nil {
		t.Fatalf("dial %s: %v (is the field up? make field-up)", node, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// fnetQueue declares a quorum queue led by node and checks the leader.
func fnetQueue(t *testing.T, node, tag string) string {
	t.Helper()
	fnetURLs(t)
	c := fnetDial(t, node, 0)
	ch, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	q := fmt.Sprintf("fnet-%s-%s-%06d", tag, node, rand.IntN(1e6))
	if _, err := ch.QueueDeclare(q, true, false, false, false, amqp.Table{
		"x-queue-type": "quorum", "x-queue-leader-locator": "client-local",
	}); err != nil {
		t.Fatalf("declare %s on %s: %v", q, node, err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		l, err := fnetSh(t, 60*time.Second, "leader", q)
		if err == nil && l == node {
			return q
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: leader %q (%v), want %s", q, l, err, node)
		}
		time.Sleep(time.Second)
	}
}

// fnetClock: times relative to the cut.
type fnetClock struct{ cut, heal time.Time }

func (c *fnetClock) rel(t time.Time) string {
	if c.cut.IsZero() || t.IsZero() {
		return "-"
	}
	return fmt.Sprintf("%+.1fs", t.Sub(c.cut).Seconds())
}

// fnetPub publishes to q over a connection to node, one message at a time,
// each waiting for its confirm (up to 3 minutes), until stop.
type fnetPub struct {
	name, node, q string
	mu            sync.Mutex
	sent, acked   int
	nacked        int
	longest       time.Duration
	longestAt     time.Time // when the longest wait began
	longestEnd    time.Time
	err           string
	errAt         time.Time
}

func (p *fnetPub) run(t *testing.T, c *amqp.Connection, stop <-chan struct{}, wg *sync.WaitGroup) {
	ch, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Millisecond):
			}
			t0 := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			go func() {
				select {
				case <-stop: // a confirm still awaited at the end is reported as such
					cancel()
				case <-ctx.Done():
				}
			}()
			dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", p.q, false, false,
				amqp.Publishing{DeliveryMode: amqp.Persistent, Body: []byte(fmt.Sprint(i))})
			var ok bool
			if err == nil {
				ok, err = dc.WaitContext(ctx)
			}
			cancel()
			el := time.Since(t0)
			p.mu.Lock()
			p.sent++
			if el > p.longest {
				p.longest, p.longestAt, p.longestEnd = el, t0, time.Now()
			}
			switch {
			case err != nil:
				p.err, p.errAt = err.Error(), time.Now()
			case ok:
				p.acked++
			default:
				p.nacked++
			}
			p.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
}

func (p *fnetPub) report(t *testing.T, scen string, clk *fnetClock) {
	p.mu.Lock()
	defer p.mu.Unlock()
	t.Logf("FIELDFACT %s %s (conn %s, queue led by %s): sent=%d acked=%d nacked=%d longest_confirm=%.1fs from %s to %s error=%q at %s",
		scen, p.name, p.node, p.q[strings.LastIndex(p.q, "-")-2:strings.LastIndex(p.q, "-")], p.sent, p.acked, p.nacked,
		p.longest.Seconds(), clk.rel(p.longestAt), clk.rel(p.longestEnd), p.err, clk.rel(p.errAt))
}

// fnetCons consumes q over a connection to node, noting the longest gap
// between deliveries, a cancel from the broker and a channel close.
type fnetCons struct {
	name, node, q        string
	mu                   sync.Mutex
	got                  int
	last, gapFrom, gapTo time.Time
	gap                  time.Duration
	cancelAt, closeAt    time.Time
	closeErr             string
}

func (k *fnetCons) run(t *testing.T, c *amqp.Connection, stop <-chan struct{}, wg *sync.WaitGroup) {
	ch, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Qos(50, 0, false); err != nil {
		t.Fatal(err)
	}
	cancels := ch.NotifyCancel(make(chan string, 1))
	closes := ch.NotifyClose(make(chan *amqp.Error, 1))
	d, err := ch.Consume(k.q, "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	k.last = time.Now()
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-cancels:
				k.mu.Lock()
				k.cancelAt = time.Now()
				k.mu.Unlock()
				cancels = nil
			case e := <-closes:
				k.mu.Lock()
				k.closeAt = time.Now()
				if e != nil {
					k.closeErr = e.Error()
				}
				k.mu.Unlock()
				return
			case m, ok := <-d:
				if !ok {
					d = nil
					continue
				}
				_ = m.Ack(false)
				now := time.Now()
				k.mu.Lock()
				k.got++
				if g := now.Sub(k.last); g > k.gap {
					k.gap, k.gapFrom, k.gapTo = g, k.last, now
				}
				k.last = now
				k.mu.Unlock()
			}
		}
	}()
}

func (k *fnetCons) report(t *testing.T, scen string, clk *fnetClock) {
	k.mu.Lock()
	defer k.mu.Unlock()
	t.Logf("FIELDFACT %s %s (conn %s): got=%d longest_gap=%.1fs from %s to %s cancelled_at=%s channel_closed_at=%s %q",
		scen, k.name, k.node, k.got, k.gap.Seconds(), clk.rel(k.gapFrom), clk.rel(k.gapTo), clk.rel(k.cancelAt), clk.rel(k.closeAt), k.closeErr)
}

// fnetDeclare declares a queue of the type over a fresh connection to node,
// bounded at 40 s, and logs what came back and when.
func fnetDeclare(t *testing.T, scen, node, qtype string, clk *fnetClock) {
	t0 := time.Now()
	res := make(chan string, 1)
	go func() {
		c, err := amqp.DialConfig(fnetURL[node], amqp.Config{Dial: amqp.DefaultDial(10 * time.Second)})
		if err != nil {
			res <- "dial: " + err.Error()
			return
		}
		defer c.Close()
		ch, err := c.Channel()
		if err != nil {
			res <- "channel: " + err.Error()
			return
		}
		q := fmt.Sprintf("fnet-decl-%s-%06d", qtype, rand.IntN(1e6))
		_, err = ch.QueueDeclare(q, true, false, false, false, amqp.Table{"x-queue-type": qtype})
		if err != nil {
			res <- "refused: " + err.Error()
			return
		}
		res <- "ok"
	}()
	var r string
	select {
	case r = <-res:
	case <-time.After(40 * time.Second):
		r = "no answer within 40s"
	}
	t.Logf("FIELDFACT %s declare %s queue on %s at %s: %s after %.1fs", scen, qtype, node, clk.rel(t0), r, time.Since(t0).Seconds())
}

// fnetWatch polls field.sh status until stop, logging each change of what
// the nodes see, relative to the cut.
func fnetWatch(t *testing.T, scen string, clk *fnetClock, stop <-chan struct{}, wg *sync.WaitGroup) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		prev := ""
		for {
			out, _ := fnetSh(t, 90*time.Second, "status")
			var seen []string
			for _, l := range strings.Split(out, "\n") {
				if strings.HasPrefix(l, "f") {
					if i := strings.Index(l, "sees "); i >= 0 {
						seen = append(seen, l[:2]+"="+l[i+5:i+6])
					} else {
						seen = append(seen, l[:2]+"=?")
					}
				}
			}
			if s := strings.Join(seen, " "); s != prev {
				t.Logf("FIELDFACT %s cluster at %s: running nodes seen %s", scen, clk.rel(time.Now()), s)
				prev = s
			}
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Second):
			}
		}
	}()
}

// fnetScenario runs probes, cuts with cut (field.sh args), holds, heals.
func fnetScenario(t *testing.T, scen string, cut []string, pubs []*fnetPub, cons []*fnetCons, declares [][2]string, heartbeat time.Duration) {
	if out, err := fnetSh(t, 2*time.Minute, "status"); err != nil || strings.Count(out, "sees 3 running") != 3 {
		t.Fatalf("the field is not whole before %s (make field-up): %v\n%s", scen, err, out)
	}
	clk := &fnetClock{}
	// The probes, the watcher and the declarations stop and are waited
	// for on every path: a t.Fatalf below must not leave them running
	// (the watcher and the declarations log, and a log after the test
	// has ended panics).
	stop := make(chan struct{})
	var wg sync.WaitGroup
	stopProbes := sync.OnceFunc(func() { close(stop); wg.Wait() })
	t.Cleanup(stopProbes)
	for _, p := range pubs {
		p.run(t, fnetDial(t, p.node, heartbeat), stop, &wg)
	}
	for _, k := range cons {
		k.run(t, fnetDial(t, k.node, heartbeat), stop, &wg)
	}
	time.Sleep(5 * time.Second)
	clk.cut = time.Now()
	if _, err := fnetSh(t, time.Minute, cut...); err != nil {
		t.Fatalf("%s: %v", strings.Join(cut, " "), err)
	}
	t.Cleanup(func() { _, _ = fnetSh(t, time.Minute, "heal") })
	var wstop = make(chan struct{})
	var wwg sync.WaitGroup
	stopWatch := sync.OnceFunc(func() { close(wstop); wwg.Wait() })
	t.Cleanup(stopWatch)
	fnetWatch(t, scen, clk, wstop, &wwg)
	time.Sleep(20 * time.Second)
	var dwg sync.WaitGroup
	t.Cleanup(dwg.Wait)
	for _, d := range declares {
		dwg.Add(1)
		go func() { defer dwg.Done(); fnetDeclare(t, scen, d[0], d[1], clk) }()
	}
	time.Sleep(time.Until(clk.cut.Add(fnetHold)))
	if _, err := fnetSh(t, time.Minute, "cut-ok"); err != nil {
		t.Errorf("%s: the cut was not in place at its end: %v", scen, err)
	}
	if _, err := fnetSh(t, time.Minute, "heal"); err != nil {
		t.Fatalf("heal: %v", err)
	}
	clk.heal = time.Now()
	t.Logf("FIELDFACT %s healed at %s", scen, clk.rel(clk.heal))
	time.Sleep(fnetAfter)
	stopProbes()
	dwg.Wait()
	// Whole again: every node sees three.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		out, err := fnetSh(t, 2*time.Minute, "status")
		if err == nil && strings.Count(out, "sees 3 running") == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: the cluster is not whole 2 minutes after the heal:\n%s", scen, out)
		}
		time.Sleep(2 * time.Second)
	}
	stopWatch()
	for _, p := range pubs {
		p.report(t, scen, clk)
	}
	for _, k := range cons {
		k.report(t, scen, clk)
	}
}

func TestFieldPartitionOneFromTwo(t *testing.T) {
	q1, q2, q3 := fnetQueue(t, "f1", "min"), fnetQueue(t, "f2", "min"), fnetQueue(t, "f3", "min")
	fnetScenario(t, "minority-f1", []string{"partition", "f1", "f2,f3"},
		[]*fnetPub{
			{name: "pub-minority-to-minority-leader", node: "f1", q: q1},
			{name: "pub-minority-to-majority-leader", node: "f1", q: q2},
			{name: "pub-majority-to-old-minority-leader", node: "f2", q: q1},
			{name: "pub-majority-to-majority-leader", node: "f2", q: q3},
		},
		[]*fnetCons{
			{name: "cons-minority-of-majority-queue", node: "f1", q: q3},
			{name: "cons-majority-of-minority-queue", node: "f2", q: q1},
		},
		[][2]string{{"f1", "quorum"}, {"f1", "classic"}, {"f2", "quorum"}, {"f2", "classic"}}, 0)
}

func TestFieldIsolateClients(t *testing.T) {
	q3 := fnetQueue(t, "f3", "iso")
	fnetScenario(t, "isolate-clients-f2", []string{"isolate-clients", "f2"},
		[]*fnetPub{
			{name: "pub-cut-client", node: "f2", q: q3},
			{name: "pub-other-client", node: "f1", q: q3},
		},
		[]*fnetCons{{name: "cons-cut-client", node: "f2", q: q3}},
		[][2]string{{"f2", "quorum"}}, 5*time.Second)
}

func TestFieldOneway(t *testing.T) {
	q1, q3 := fnetQueue(t, "f1", "ow"), fnetQueue(t, "f3", "ow")
	fnetScenario(t, "oneway-f1-to-f3", []string{"partition-oneway", "f1", "f3"},
		[]*fnetPub{
			{name: "pub-f3-to-f1-leader", node: "f3", q: q1},
			{name: "pub-f1-to-f3-leader", node: "f1", q: q3},
		},
		[]*fnetCons{{name: "cons-f3-of-f1-queue", node: "f3", q: q1}},
		[][2]string{{"f1", "quorum"}, {"f3", "quorum"}}, 0)
}
