package mq

import (
	"slices"
	"testing"
	"time"

	"github.com/acemq/acemq-go/retry"
	"github.com/acemq/acemq-go/topology"
)

func declOf(t *topology.Topology) declaration {
	return declaration{exchanges: t.Exchanges(), queues: t.Queues(), bindings: t.Bindings()}
}

func names[T any](xs []T, name func(T) string) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = name(x)
	}
	return out
}

func bindingNames(d declaration) []string {
	return names(d.bindings, func(b topology.Binding) string { return b.Queue + "<-" + b.Exchange })
}

func exchangeNames(d declaration) []string {
	return names(d.exchanges, func(e topology.Exchange) string { return e.Name })
}

// What a new connection declares again: the exclusive, auto-delete and
// transient queues and exchanges, with the bindings of those queues and to
// those exchanges, and the exchanges those bindings need; nothing durable
// otherwise.
func TestRememberedLost(t *testing.T) {
	var r remembered
	r.note(declOf(topology.New().
		Exchange("events", topology.Fanout).
		Exchange("scratch", topology.AutoDelete()).
		Queue("orders", topology.DeadLetter()).
		Queue("inst", topology.Exclusive()).
		Queue("tmp", topology.AutoDelete()).
		Binding("inst", "events", "").
		Binding("orders", "events", "").
		Binding("orders", "scratch", "k")))
	d := r.lost(nil)
	if got, want := d.queueNames(), []string{"inst", "tmp"}; !slices.Equal(got, want) {
		t.Errorf("queues %v, want %v", got, want)
	}
	if got, want := bindingNames(d), []string{"inst<-events", "orders<-scratch"}; !slices.Equal(got, want) {
		t.Errorf("bindings %v, want %v", got, want)
	}
	if got, want := exchangeNames(d), []string{"events", "scratch"}; !slices.Equal(got, want) {
		t.Errorf("exchanges %v, want %v", got, want)
	}
	r.forget("inst")
	if got := r.lost(nil).queueNames(); !slices.Equal(got, []string{"tmp"}) {
		t.Errorf("after forget: %v", got)
	}
}

// An exclusive or auto-delete queue a consumer of the Broker consumed is
// declared again only while a consumer runs on it, with its bindings; a
// transient durable=false queue, which a stopped consumer leaves on the
// broker, and one never consumed here are declared again as before.
func TestRememberedLostSkipsUnused(t *testing.T) {
	var r remembered
	r.note(declOf(topology.New().
		Exchange("events", topology.Fanout).
		Exchange("scratch", topology.AutoDelete()).
		Queue("inst", topology.Exclusive()).
		Queue("tmp", topology.AutoDelete()).
		Queue("later", topology.AutoDelete()).
		Queue("keep", topology.Transient()).
		Binding("inst", "events", "").
		Binding("tmp", "scratch", "").
		Binding("keep", "events", "")))
	for _, q := range []string{"inst", "tmp", "keep"} {
		r.noteConsumed(q)
	}
	d := r.lost(map[string]bool{})
	if got, want := d.queueNames(), []string{"later", "keep"}; !slices.Equal(got, want) {
		t.Errorf("none running: queues %v, want %v", got, want)
	}
	if got, want := bindingNames(d), []string{"keep<-events"}; !slices.Equal(got, want) {
		t.Errorf("none running: bindings %v, want %v", got, want)
	}
	r.noteConsumed("never-declared") // not remembered: not noted either
	if len(r.consumed) != 3 {
		t.Errorf("consumed %v, want inst, tmp and keep only", r.consumed)
	}
	d = r.lost(map[string]bool{"tmp": true})
	if got, want := d.queueNames(), []string{"tmp", "later", "keep"}; !slices.Equal(got, want) {
		t.Errorf("tmp running: queues %v, want %v", got, want)
	}
	if got, want := bindingNames(d), []string{"tmp<-scratch", "keep<-events"}; !slices.Equal(got, want) {
		t.Errorf("tmp running: bindings %v, want %v", got, want)
	}
}

// What a queue found missing is declared again with: itself, its failure
// half as declared, the bindings of all of them and their exchanges; a
// queue never declared (only named by a consumer's failure half) has none.
func TestRememberedGroup(t *testing.T) {
	var r remembered
	p := retry.Exponential(3, 40*time.Second, retry.InProcessLimit(0))
	r.note(declOf(topology.New().
		Exchange("events").
		Queue("orders", topology.DeadLetter(), topology.Retry(p)).
		Queue("other").
		Binding("orders", "events", "order.*").
		Binding("other", "events", "")))
	r.note(declOf(topology.ForConsumer("theirs", p)))
	d, ok := r.group("orders")
	if !ok {
		t.Fatal("orders not remembered")
	}
	want := []string{"orders", "orders.dlq", "orders.parked", "orders.retry.40s", "orders.retry.80s"}
	if got := d.queueNames(); !slices.Equal(got, want) {
		t.Errorf("queues %v, want %v", got, want)
	}
	if got, want := bindingNames(d), []string{"orders.dlq<-acemq.dlx", "orders.parked<-acemq.dlx", "orders<-acemq.retry", "orders<-events"}; !slices.Equal(got, want) {
		t.Errorf("bindings %v, want %v", got, want)
	}
	if got, want := exchangeNames(d), []string{"events", "acemq.dlx", "acemq.retry"}; !slices.Equal(got, want) {
		t.Errorf("exchanges %v, want %v", got, want)
	}
	if _, ok := r.group("theirs"); ok {
		t.Error("a queue only a consumer's failure half names is not the service's")
	}
	// Declared twice: remembered once, the last declaration winning.
	r.note(declOf(topology.New().Queue("other", topology.Classic())))
	if i := slices.IndexFunc(r.queues, func(q topology.Queue) bool { return q.Name == "other" }); r.queues[i].Args[topology.ArgQueueType] != nil {
		t.Errorf("other: %v, want the classic declaration", r.queues[i].Args)
	}
	if n := len(r.queues); n != 10 {
		t.Errorf("%d queues remembered, want 10 (6 of the service, 4 of a consumer's failure half)", n)
	}
}
