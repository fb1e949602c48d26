package fxmodule

import (
	"testing"

	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/topology"
)

// Events and commands (docs/contract.md): a publisher to a topic, fanout
// or headers exchange of the app's topology allows unroutable publishes; to
// the default exchange, a direct exchange or an exchange the topology does
// not declare it stays mandatory; the caller's options come last.
func TestPublisherOptionsEventsAndCommands(t *testing.T) {
	topo := topology.New().
		Exchange("events").
		Exchange("audit", topology.Fanout).
		Exchange("by-header", topology.Headers).
		Exchange("commands", topology.Direct)
	for _, c := range []struct {
		topo      *topology.Topology
		exchange  string
		opts      []mq.PublisherOption
		mandatory bool
	}{
		{topo, "events", nil, false},
		{topo, "audit", nil, false},
		{topo, "by-header", nil, false},
		{topo, "commands", nil, true},
		{topo, "", nil, true},
		{topo, "undeclared", nil, true},
		{nil, "events", nil, true},
		{topo, "events", []mq.PublisherOption{mq.Mandatory()}, true},
		{topo, "commands", []mq.PublisherOption{mq.AllowUnroutable()}, false},
	} {
		if got := mq.IsMandatory(PublisherOptions(c.topo, c.exchange, c.opts...)...); got != c.mandatory {
			t.Errorf("publisher to %q (topology %v, %d options): mandatory %v, want %v", c.exchange, c.topo != nil, len(c.opts), got, c.mandatory)
		}
	}
}
