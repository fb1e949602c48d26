package main

import (
	"context"
	"fmt"

	"github.com/acemq/acemq-go/internal/field/fault"
)

// faultSchedule is -mode field's schedule: fault.Generate's from the
// seed and the generator's version, run by fault.Run through scripts/field.sh, the process faults
// (kill-relay, kill-consumer, conn-cut) handed to the fleet.
type faultSchedule struct {
	s      fault.Schedule
	script string
}

func fieldSchedule(o options) (schedule, error) {
	s, err := fault.Generate(o.seed, o.duration, o.version)
	if err != nil {
		return nil, fmt.Errorf("SCHEDULE_VERSION: %w", err)
	}
	return faultSchedule{s: s, script: o.script}, nil
}

func (f faultSchedule) String() string { return f.s.String() }

// Counts: partitions are every kind of cut (both ways, one way, a client
// cut from its node, the leaders' node cut off); kills are SIGKILLs of
// nodes, processes and the database; restarts are graceful ones (a
// rolling restart is three).
func (f faultSchedule) Counts() (faults, partitions, kills, restarts int) {
	for _, x := range f.s.Faults {
		switch string(x.Kind) {
		case "partition", "partition-oneway", "isolate-clients", "partition-leader":
			partitions++
		case "kill", "kill-relay", "kill-consumer", "pg-kill":
			kills++
		case "restart", "pg-restart":
			restarts++
		case "rolling":
			restarts += 3
		}
	}
	return len(f.s.Faults), partitions, kills, restarts
}

func (f faultSchedule) Run(ctx context.Context, fl *fleet, o options) ([]faultEvent, error) {
	log, err := newEventLog(o.out)
	if err != nil {
		return nil, err
	}
	err = fault.Run(ctx, f.s, f.script, fl, func(e fault.Event) {
		log.add(faultEvent{T: e.T, Kind: string(e.Fault.Kind), Args: e.Fault.Args, Phase: e.Phase, Err: e.Err, Note: e.Note})
	})
	return log.close(), err
}
