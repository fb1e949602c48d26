package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/acemq/acemq-go/internal/field/check"
)

// rungWatch records where the scripted queue's broker rungs live (a
// classic rung's node, a durable rung's leader), and which node leads the
// scripted queue itself (their
// home, where an expired rung dead-letters to), through `field.sh
// queue-nodes`, into out/rungs.jsonl.
type rungWatch struct {
	o      options
	s      site
	mu     sync.Mutex
	places []check.RungPlace
}

// first looks before the faults begin, trying again (rabbitmqctl on a
// loaded machine can fail) until every rung is placed or three minutes
// have passed.
func (w *rungWatch) first(ctx context.Context) {
	c, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	for c.Err() == nil {
		if w.look(c) == len(w.s.names.Rungs()) {
			return
		}
		sleep(c, 5*time.Second)
	}
	logf("field: where the rungs live is unknown: no loss will be attributed to a rung")
}

// look asks once and records each rung whose node is new or changed, and
// says how many rungs it found. A failure is logged: the rungs' nodes stay
// as last known (or unknown, and then no loss is attributed to a rung).
func (w *rungWatch) look(ctx context.Context) int {
	c, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(c, w.o.script, "queue-nodes", w.s.names.Prefix)
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.Output()
	if err != nil {
		if ctx.Err() == nil { // a look cut short by stop is no failure
			logf("field: where the rungs live: %s queue-nodes: %v", w.o.script, err)
		}
		return 0
	}
	rungs := w.s.names.Rungs()
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	last := map[string]string{}
	for _, p := range w.places {
		last[p.Queue] = p.Node
	}
	f, err := os.OpenFile(filepath.Join(w.o.out, "rungs.jsonl"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		logf("field: rungs.jsonl: %v", err)
	}
	found := 0
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		x := strings.Fields(sc.Text())
		if len(x) != 2 {
			continue
		}
		if _, ok := rungs[x[0]]; ok {
			found++
		} else if x[0] != w.s.names.WorkQueue() {
			continue
		}
		if last[x[0]] == x[1] {
			continue
		}
		p := check.RungPlace{Queue: x[0], Node: x[1], At: now}
		w.places = append(w.places, p)
		logf("field: %s lives on %s", p.Queue, p.Node)
		if f != nil {
			b, _ := json.Marshal(p)
			_, _ = f.Write(append(b, '\n'))
		}
	}
	if f != nil {
		_ = f.Close()
	}
	return found
}

// watch looks every period, in a goroutine of its own, until ctx ends or
// stop is called; stop waits for that goroutine to end (a look under way is
// cut short), and may be called more than once.
func (w *rungWatch) watch(ctx context.Context, period time.Duration) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(period):
			}
			w.look(ctx)
		}
	}()
	return sync.OnceFunc(func() {
		cancel()
		<-done
	})
}

func (w *rungWatch) all() []check.RungPlace {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]check.RungPlace(nil), w.places...)
}

// spans pairs the fault log's starts and ends: each start with the next
// end of the same fault (kind and arguments); a start without an end is a
// span with a zero End.
func spans(events []faultEvent) []check.FaultSpan {
	var out []check.FaultSpan
	open := map[string][]int{}
	for _, e := range events {
		k := e.Kind + " " + strings.Join(e.Args, " ")
		switch e.Phase {
		case "start":
			open[k] = append(open[k], len(out))
			out = append(out, check.FaultSpan{Kind: e.Kind, Args: e.Args, Start: e.T})
		case "end":
			if q := open[k]; len(q) > 0 {
				out[q[0]].End = e.T
				open[k] = q[1:]
			}
		}
	}
	return out
}

// detectionWindow is how long the cluster may take to notice a cut or a
// heal: 1.5 net_ticktime (field.sh's FIELD_TICKTIME, 10 s unless set),
// as measured (a cut node is seen down after 10-15 s).
func detectionWindow() time.Duration {
	t := 10.0
	if v, err := strconv.ParseFloat(os.Getenv("FIELD_TICKTIME"), 64); err == nil && v > 0 {
		t = v
	}
	return time.Duration(1.5 * t * float64(time.Second))
}

// rungMode reads FIELD_RUNGS: "durable" or empty (the default: the
// scripted queue's broker waits go through durable rungs) or "classic"
// (classic rungs, for comparison); classic is true for the latter.
func rungMode() (classic bool, err error) {
	switch v := os.Getenv("FIELD_RUNGS"); v {
	case "", check.RungsDurable:
		return false, nil
	case check.RungsClassic:
		return true, nil
	default:
		return false, fmt.Errorf("FIELD_RUNGS=%q: want %s or %s", v, check.RungsDurable, check.RungsClassic)
	}
}

// modeName is FIELD_RUNGS's mode as the FIELD line names it.
func modeName() string {
	if classic, _ := rungMode(); classic {
		return check.RungsClassic
	}
	return check.RungsDurable
}

// dlxConfirmTimeout is the field nodes' dead_letter_worker_publisher_
// confirm_timeout: FIELD_DLX_CONFIRM_TIMEOUT milliseconds, as field.sh
// sets it (15000 unless set, as RabbitMQ's Jepsen setup has it; RabbitMQ's
// default is 180000). A quorum queue's dead-letter worker re-publishes a
// dead letter it got no confirm for after this long.
func dlxConfirmTimeout() time.Duration {
	ms := 15000.0
	if v, err := strconv.ParseFloat(os.Getenv("FIELD_DLX_CONFIRM_TIMEOUT"), 64); err == nil && v > 0 {
		ms = v
	}
	return time.Duration(ms * float64(time.Millisecond))
}

// defaultBound is how long after the last heal every message must have
// reached its end: the 3 minutes the classic rungs needed, plus twice the
// dead-letter worker's confirm timeout (dlxConfirmTimeout). A durable rung
// whose dead letters went out unconfirmed into a cut (or to a home queue
// with no leader) re-publishes them only when that timeout runs out, once
// for the publish lost in the cut and once more for a retry that went to
// a leader still settling after the heal.
func defaultBound() time.Duration { return 3*time.Minute + 2*dlxConfirmTimeout() }

// checkDLXTimeout logs the dead-letter worker's confirm timeout each field
// node runs with (`field.sh dlx-confirm-timeout`), and says loudly when
// one differs from dlxConfirmTimeout, which the stuck bound counts on.
func checkDLXTimeout(ctx context.Context, o options) {
	c, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	out, err := exec.CommandContext(c, o.script, "dlx-confirm-timeout").Output()
	if err != nil {
		logf("field: the nodes' dead-letter confirm timeout is unknown: %s dlx-confirm-timeout: %v", o.script, err)
		return
	}
	want := strconv.FormatInt(dlxConfirmTimeout().Milliseconds(), 10)
	lines := strings.Fields(strings.TrimSpace(string(out)))
	for i := 0; i+1 < len(lines); i += 2 {
		if lines[i+1] != want {
			logf("field: WARNING %s runs with dead_letter_worker_publisher_confirm_timeout %s ms, not %s: the stuck bound %s assumes %s", lines[i], lines[i+1], want, o.bound, want)
		}
	}
	logf("field: dead_letter_worker_publisher_confirm_timeout (ms): %s", strings.Join(strings.Fields(string(out)), " "))
}
