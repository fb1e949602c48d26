package fxmodule

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"go.uber.org/fx"

	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/ops"
	"github.com/acemq/acemq-go/topology"
)

// WithConsole provides the dead-letter console ([ops.NewConsole]) as
// *[ops.Console], an http.Handler for the service to mount on its own admin
// server:
//
//	fxmodule.WithConsole(ops.ConsoleOptions{BasePath: "/dlq", Token: token}),
//	fx.Invoke(func(con *ops.Console) { admin.Handle("/dlq/", http.StripPrefix("/dlq", con)) }),
//
// It watches every queue of the app's merged topology that has a .dlq or
// a .parked (declared with [topology.DeadLetter] or [topology.Retry]), besides
// any opts.Queues name, so the service never lists its queues twice. Its
// operator actions (replay, delete, purge) are logged to opts.Logger,
// default the broker's logger (the module's). The console is built while
// the app is (an option it cannot use fails fx.New) and closed at stop,
// before the broker, stopping the replays it runs. The module serves
// nothing itself: the service decides where, and behind what, the console
// is reachable.
func WithConsole(opts ops.ConsoleOptions) fx.Option {
	opts.Queues = slices.Clone(opts.Queues)
	return fx.Options(
		fx.Provide(func(p consoleParams) (*ops.Console, error) {
			o := opts
			o.Queues = append(slices.Clone(opts.Queues), consoleQueues(merged(p.Topologies))...)
			con, err := ops.NewConsole(p.Broker, o)
			if err != nil {
				return nil, fmt.Errorf("fxmodule.WithConsole: %w", err)
			}
			p.Lifecycle.Append(fx.Hook{OnStop: func(ctx context.Context) error {
				if err := con.Close(ctx); err != nil {
					return fmt.Errorf("fxmodule: stop: close the console: %w", err)
				}
				return nil
			}})
			return con, nil
		}),
		// Built with the app, so that a console option it cannot use fails
		// fx.New, and closed at stop even when nothing else asks for it.
		fx.Invoke(func(*ops.Console) {}),
	)
}

// consoleParams are what WithConsole's console is built from.
type consoleParams struct {
	fx.In

	Lifecycle  fx.Lifecycle
	Broker     *mq.Broker
	Topologies []*topology.Topology `group:"acemq.topologies"`
}

// consoleQueues returns the source queues of t whose failures the console
// shows: every queue declared with topology.DeadLetter or topology.Retry
// (so with a .dlq, a .parked or both), sorted. Nil for a nil t.
func consoleQueues(t *topology.Topology) []string {
	if t == nil {
		return nil
	}
	var out []string
	for _, q := range t.Queues() {
		if q.DeadLetter || q.HasRetry {
			out = append(out, q.Name)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// merged is the app's topology from its fragments, in a fixed order (fx
// hands a value group over in a random one); nil when there are none.
func merged(frags []*topology.Topology) *topology.Topology {
	frags = slices.DeleteFunc(slices.Clone(frags), func(t *topology.Topology) bool { return t == nil })
	if len(frags) == 0 {
		return nil
	}
	slices.SortStableFunc(frags, func(a, b *topology.Topology) int { return strings.Compare(a.String(), b.String()) })
	return topology.New().Merge(frags...)
}
