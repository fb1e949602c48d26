package main

import (
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/acemq/acemq-go/ops"
	"github.com/acemq/acemq-go/topology"
)

// rungsCmd shows a queue's rungs of both kinds for the waits given, so an
// operator moving a queue from classic rungs to durable ones sees when
// the classic set is empty and can be deleted by hand.
type rungsCmd struct {
	Queue string          `arg:"" help:"The queue the rungs bring messages home to."`
	Waits []time.Duration `name:"waits" required:"" sep:"," help:"The broker waits of the queue's retry policy (--waits 30s,5m)."`
}

type rungJSON struct {
	Rung      string `json:"rung"`
	Kind      string `json:"kind"`
	WaitMs    int64  `json:"wait_ms"`
	Ready     int    `json:"ready"`
	Consumers int    `json:"consumers"`
}

// The words rungs prints under its table.
const (
	rungsRetirable = "classic rungs empty: safe to retire"
	rungsNone      = "no rungs for these waits"
)

func (c *rungsCmd) Run(e *env) error {
	for _, w := range c.Waits {
		if w < time.Second {
			return &codedError{exitUsage, fmt.Errorf("--waits %v: a rung waits a whole number of seconds, at least 1s", w)}
		}
	}
	rs, err := ops.Rungs(e.ctx, e.b, c.Queue, c.Waits...)
	rows := make([]rungJSON, 0, len(rs))
	tw := tabwriter.NewWriter(e.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RUNG\tKIND\tWAIT\tREADY\tCONSUMERS")
	for _, r := range rs {
		kind := "classic"
		if r.Durable {
			kind = "durable"
		}
		rows = append(rows, rungJSON{r.Queue, kind, r.Wait.Milliseconds(), r.Ready, r.Consumers})
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\n", r.Queue, kind, topology.Short(r.Wait), r.Ready, r.Consumers)
	}
	_ = tw.Flush()
	retirable := ops.RungsRetirable(rs)
	e.result = map[string]any{"queue": c.Queue, "rungs": rows, "classic_retirable": retirable}
	if err != nil {
		return plainNotFound(err, c.Queue)
	}
	switch {
	case len(rs) == 0:
		fmt.Fprintln(e.out, rungsNone)
	case retirable:
		fmt.Fprintln(e.out, rungsRetirable)
	}
	return nil
}
