package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"strings"
	"time"
)

// schedule is what the orchestrator runs while the workers work.
type schedule interface {
	// String is the schedule, one fault a line.
	String() string
	// Counts: faults in all, partitions, kills (nodes and processes),
	// restarts (of nodes).
	Counts() (faults, partitions, kills, restarts int)
	// Run runs it (process faults through f) and returns every fault's
	// start and end; everything is healed when it returns.
	Run(ctx context.Context, f *fleet, o options) ([]faultEvent, error)
}

func newSchedule(o options) (schedule, error) {
	switch o.mode {
	case "cluster":
		return newDrill(o.seed, o.duration), nil
	case "field":
		return fieldSchedule(o)
	}
	return nil, fmt.Errorf("unknown -mode %q", o.mode)
}

// drillFault is one fault of the cluster drill.
type drillFault struct {
	At, For time.Duration
	Kind    string // kill-relay, kill-consumer, conn-cut, kill-node
	Node    string // c1..c3 for kill-node
}

// drill is the schedule of -mode cluster: what can be done to
// scripts/cluster.sh's nodes and the workers without a packet filter.
type drill struct{ faults []drillFault }

func newDrill(seed int64, d time.Duration) drill {
	rnd := rand.New(rand.NewPCG(uint64(seed), 2))
	var dr drill
	kinds := []string{"kill-relay", "kill-consumer", "conn-cut", "kill-node"}
	for t := 10 * time.Second; t < d-10*time.Second; t += time.Duration(10+rnd.IntN(15)) * time.Second {
		f := drillFault{At: t, Kind: kinds[rnd.IntN(len(kinds))]}
		if f.Kind == "kill-node" {
			f.Node = fmt.Sprintf("c%d", 1+rnd.IntN(3))
			f.For = time.Duration(10+rnd.IntN(20)) * time.Second
		}
		dr.faults = append(dr.faults, f)
	}
	return dr
}

func (d drill) String() string {
	var b strings.Builder
	for _, f := range d.faults {
		fmt.Fprintf(&b, "  +%-6s %-14s %s for %s\n", f.At, f.Kind, f.Node, f.For)
	}
	return b.String()
}

func (d drill) Counts() (faults, partitions, kills, restarts int) {
	for _, f := range d.faults {
		switch f.Kind {
		case "kill-relay", "kill-consumer":
			kills++
		case "kill-node":
			kills++
			restarts++
		}
	}
	return len(d.faults), 0, kills, restarts
}

func (d drill) Run(ctx context.Context, f *fleet, o options) ([]faultEvent, error) {
	log, err := newEventLog(o.out)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	var firstErr error
	for _, ft := range d.faults {
		sleep(ctx, time.Until(start.Add(ft.At)))
		if ctx.Err() != nil {
			break
		}
		args := []string{ft.Node}
		log.add(faultEvent{T: time.Now(), Kind: ft.Kind, Args: args, Phase: "start"})
		var err error
		switch ft.Kind {
		case "kill-relay":
			err = f.Kill("relay")
		case "kill-consumer":
			err = f.Kill("consumer")
		case "conn-cut":
			err = f.CutConnections()
		case "kill-node":
			if err = clusterSh(ctx, "kill", ft.Node); err == nil {
				sleep(ctx, ft.For)
				err = clusterSh(context.WithoutCancel(ctx), "start", ft.Node)
			}
		}
		if err != nil {
			log.add(faultEvent{T: time.Now(), Kind: ft.Kind, Args: args, Phase: "error", Err: err.Error()})
			if firstErr == nil {
				firstErr = err
			}
		}
		log.add(faultEvent{T: time.Now(), Kind: ft.Kind, Args: args, Phase: "end"})
	}
	sleep(ctx, time.Until(start.Add(o.duration)))
	return log.close(), firstErr
}

func clusterSh(ctx context.Context, args ...string) error {
	c, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(c, "./scripts/cluster.sh", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("cluster.sh %v: %v: %s", args, err, strings.TrimSpace(string(out)))
	}
	return nil
}
