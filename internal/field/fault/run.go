package fault

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"
)

// Procs is what the orchestrator does for the faults that hit the
// workload's own processes rather than the cluster.
type Procs interface {
	// Kill ends one process of the role ("relay", "consumer") with SIGKILL.
	Kill(role string) error
	// CutConnections cuts the workload's broker connections.
	CutConnections() error
}

// Event is a fault starting, ending or failing, as Run reports it.
type Event struct {
	T     time.Time
	Fault Fault
	Phase string // "start", "end" or "error"
	Err   string // for "error": what failed
	// Note says, for the start of a fault whose target is found when it
	// fires (PartitionLeader), which node was cut and why.
	Note string
}

// Phases of an Event.
const (
	PhaseStart = "start"
	PhaseEnd   = "end"
	PhaseError = "error"
)

// Bounds of one field.sh call, by what it does. start waits for a node to
// boot and rejoin (field.sh bounds that at 180 s itself); a rolling restart
// is three of them.
const (
	cutTimeout     = 60 * time.Second
	nodeTimeout    = 5 * time.Minute
	rollingTimeout = 15 * time.Minute
	pgTimeout      = 2 * time.Minute
	cutOKTimeout   = 20 * time.Second
	healTimeout    = 10 * time.Minute
	// rabbitmqctl's own bound (field.sh's FIELD_CTL_TIMEOUT, seconds) when
	// listing the leaders, a little less than leaderTimeout, so it does
	// not outlive the call (and the rows it printed are kept).
	leaderCtlTimeout = "40"
)

// leaderTimeout bounds listing the quorum queues' leaders for a
// PartitionLeader, the time its For sets aside for that (leaderFind):
// rabbitmqctl against a cluster that is partitioned or slow can hang
// 20-60 s, and on the loaded field machine one call takes 20-30 s.
var leaderTimeout = leaderFind

// CutCheckEvery is how often Run runs `field.sh cut-ok` while a cut lasts
// (more often for cuts shorter than five times this).
var CutCheckEvery = 2 * time.Second

// runner executes one schedule.
type runner struct {
	script string
	procs  Procs
	log    func(Event)
	mu     sync.Mutex // serialises log and errs
	errs   []error
}

func (r *runner) event(f Fault, phase string, err error) {
	e := Event{T: time.Now(), Fault: f, Phase: phase}
	if err != nil {
		e.Err = err.Error()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.log != nil {
		r.log(e)
	}
}

func (r *runner) startEvent(f Fault, note string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.log != nil {
		r.log(Event{T: time.Now(), Fault: f, Phase: PhaseStart, Note: note})
	}
}

func (r *runner) fail(f Fault, err error) {
	r.event(f, PhaseError, err)
	r.mu.Lock()
	r.errs = append(r.errs, fmt.Errorf("%s: %w", f, err))
	r.mu.Unlock()
}

// sh runs the script with args, bounded by timeout (and ctx); its stderr is
// in the error.
func (r *runner) sh(ctx context.Context, timeout time.Duration, args ...string) error {
	_, err := r.output(ctx, timeout, nil, args...)
	return err
}

// output runs the script with args and env added to the environment,
// bounded by timeout (and ctx), and returns its stdout; its stderr is in
// the error.
func (r *runner) output(ctx context.Context, timeout time.Duration, env []string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, r.script, args...)
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if len(msg) > 400 {
			msg = "…" + msg[len(msg)-400:]
		}
		return stdout.String(), fmt.Errorf("%s %s: %w: %s", r.script, strings.Join(args, " "), err, msg)
	}
	return stdout.String(), nil
}

// resolve turns a schedule's PartitionLeader (Args ["else", fN]) into the
// cut it makes now: Args [node, the two others], node being the one that
// leads the most quorum queues (listed by `script quorum-leaders`, within
// leaderTimeout), and says which node and why.
func (r *runner) resolve(ctx context.Context, f Fault) (Fault, string) {
	fallback := "f1"
	if len(f.Args) > 0 {
		fallback = f.Args[len(f.Args)-1]
	}
	t0 := time.Now()
	out, err := r.output(ctx, leaderTimeout, []string{"FIELD_CTL_TIMEOUT=" + leaderCtlTimeout}, "quorum-leaders")
	node, why := mostLeader(out, err, fallback)
	f.Args = []string{node, others(node)}
	return f, fmt.Sprintf("%s (asked in %.1fs)", why, time.Since(t0).Seconds())
}

// mostLeader picks from quorum-leaders' rows (queue, node) the node that
// leads the most quorum queues, and says why. When the listing failed or
// holds no leader, it is fallback; a tie goes to fallback when it is
// among the tied, else to the first of them by name.
func mostLeader(rows string, err error, fallback string) (node, why string) {
	if err != nil {
		return fallback, fmt.Sprintf("%s by the schedule: the leaders were not listed: %v", fallback, err)
	}
	nodes := []string{"f1", "f2", "f3"}
	led := map[string][]string{}
	total := 0
	for _, line := range strings.Split(rows, "\n") {
		if x := strings.Fields(line); len(x) == 2 && slices.Contains(nodes, x[1]) {
			led[x[1]] = append(led[x[1]], x[0])
			total++
		}
	}
	if total == 0 {
		return fallback, fmt.Sprintf("%s by the schedule: no quorum queue's leader was listed", fallback)
	}
	var tied []string
	most := 0
	for _, n := range nodes {
		switch k := len(led[n]); {
		case k > most:
			most, tied = k, []string{n}
		case k == most && k > 0:
			tied = append(tied, n)
		}
	}
	node = tied[0]
	rule := ""
	if len(tied) > 1 {
		rule = fmt.Sprintf("; tied with %s, broken by name", strings.Join(tied[1:], ","))
		for _, n := range tied {
			if n == fallback {
				node = n
				rule = fmt.Sprintf("; tied (%s), broken by the schedule's %s", strings.Join(tied, ","), fallback)
			}
		}
	}
	return node, fmt.Sprintf("%s leads %d of %d quorum queues (%s)%s", node, most, total, strings.Join(led[node], ","), rule)
}

// begin applies the fault; finish undoes it (for kinds that last).
func (r *runner) begin(ctx context.Context, f Fault) error {
	switch f.Kind {
	case Partition, PartitionOneway, IsolateClients, Netem:
		return r.sh(ctx, cutTimeout, append([]string{string(f.Kind)}, f.Args...)...)
	case PartitionLeader:
		if len(f.Args) != 2 || f.Args[0] == "else" {
			return fmt.Errorf("%s: the node to cut was not resolved", f)
		}
		return r.sh(ctx, cutTimeout, append([]string{string(Partition)}, f.Args...)...)
	case KillNode:
		return r.sh(ctx, cutTimeout, append([]string{"kill"}, f.Args...)...)
	case Restart:
		return r.sh(ctx, nodeTimeout, append([]string{"restart"}, f.Args...)...)
	case Rolling:
		for _, n := range []string{"f1", "f2", "f3"} {
			if err := r.sh(ctx, nodeTimeout, "restart", n); err != nil {
				return err
			}
		}
		return nil
	case PGKill, PGRestart:
		return r.sh(ctx, pgTimeout, string(f.Kind))
	case KillRelay, KillConsumer:
		if r.procs == nil {
			return errors.New("no Procs to kill a process with")
		}
		role := strings.TrimPrefix(string(f.Kind), "kill-")
		if len(f.Args) > 0 {
			role = f.Args[0]
		}
		return r.procs.Kill(role)
	case ConnCut:
		if r.procs == nil {
			return errors.New("no Procs to cut connections with")
		}
		return r.procs.CutConnections()
	}
	return fmt.Errorf("unknown fault kind %q", f.Kind)
}

func (r *runner) finish(ctx context.Context, f Fault) error {
	switch f.Kind {
	case Partition, PartitionOneway, IsolateClients, PartitionLeader:
		return r.sh(ctx, cutTimeout, "heal")
	case Netem:
		return r.sh(ctx, cutTimeout, "netem-clear")
	case KillNode:
		return r.sh(ctx, nodeTimeout, append([]string{"start"}, f.Args...)...)
	case PGKill:
		return r.sh(ctx, pgTimeout, "pg-start")
	}
	return nil
}

// hold waits until end, checking cut-ok every CutCheckEvery when f is a
// cut: a cut found missing is logged as an error, healed and applied again.
func (r *runner) hold(ctx context.Context, f Fault, end time.Time) {
	every := CutCheckEvery
	if f.For/5 < every {
		every = max(f.For/5, 10*time.Millisecond)
	}
	for {
		wait := time.Until(end)
		if wait <= 0 {
			return
		}
		if f.IsCut() && every < wait {
			wait = every
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		if !f.IsCut() || !time.Now().Before(end) {
			continue
		}
		if err := r.sh(ctx, cutOKTimeout, "cut-ok"); err != nil {
			if ctx.Err() != nil {
				return
			}
			r.event(f, PhaseError, fmt.Errorf("cut no longer in place, applying it again: %w", err))
			err = r.sh(ctx, cutTimeout, "heal")
			if err == nil {
				err = r.begin(ctx, f)
			}
			if err != nil {
				r.fail(f, fmt.Errorf("applying the cut again: %w", err))
				return
			}
		}
	}
}

// Run executes s through script (scripts/field.sh): each fault starts at
// its offset from now, lasts For (restart and rolling last as long as the
// restarts take) and is undone; process faults go to procs. Every start and
// end goes to log (which may be nil), and every failure as an "error"
// event. A PartitionLeader finds its node when it fires (see resolve): its
// events carry the cut it made, the start a Note saying why that node. While a cut lasts, `script cut-ok` runs every CutCheckEvery; a cut
// that vanished is logged as an error and applied again. After the last
// fault, and when ctx ends, Run heals everything: heal, netem-clear, every
// node started, PostgreSQL started. It returns the failures of the
// schedule's steps and of the final heal, joined, or ctx's error when ctx
// ended first.
func Run(ctx context.Context, s Schedule, script string, procs Procs, log func(Event)) error {
	r := &runner{script: script, procs: procs, log: log}
	start := time.Now()
	var wg sync.WaitGroup
	for _, f := range s.Faults {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Until(start.Add(f.At))):
			}
			end := start.Add(f.End())
			note := ""
			if f.Kind == PartitionLeader {
				// The cut lasts For less the time set aside to find
				// its node, from when it is found (so no longer than
				// planned, and as long whether found at once or not).
				f, note = r.resolve(ctx, f)
				if cutEnd := time.Now().Add(f.For - leaderTimeout); cutEnd.Before(end) {
					end = cutEnd
				}
			}
			r.startEvent(f, note)
			if err := r.begin(ctx, f); err != nil {
				r.fail(f, err)
				// A half-applied fault is still undone below.
			}
			r.hold(ctx, f, end)
			if err := r.finish(context.WithoutCancel(ctx), f); err != nil {
				r.fail(f, err)
				return
			}
			r.event(f, PhaseEnd, nil)
		}()
	}
	wg.Wait()
	if err := r.healAll(context.WithoutCancel(ctx)); err != nil {
		r.mu.Lock()
		r.errs = append(r.errs, err)
		r.mu.Unlock()
	}
	if ctx.Err() != nil {
		return errors.Join(append([]error{ctx.Err()}, r.errs...)...)
	}
	return errors.Join(r.errs...)
}

// healAll leaves the field whole: no cut, no slow link, every node and
// PostgreSQL running.
func (r *runner) healAll(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, healTimeout)
	defer cancel()
	var errs []error
	for _, args := range [][]string{{"heal"}, {"netem-clear"}, {"pg-start"}, {"start", "f1"}, {"start", "f2"}, {"start", "f3"}} {
		timeout := cutTimeout
		if args[0] != "heal" && args[0] != "netem-clear" {
			timeout = nodeTimeout
		}
		if err := r.sh(ctx, timeout, args...); err != nil {
			errs = append(errs, fmt.Errorf("final heal: %w", err))
		}
	}
	return errors.Join(errs...)
}
