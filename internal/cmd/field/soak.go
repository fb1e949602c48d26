package main

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/acemq/acemq-go/internal/field/history"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/ops"
)

// quietLogger is the orchestrator's own broker's logger: errors only.
func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
}

// sampleBroker writes, every o.sample, the backlog (ready messages in the
// work, inbox and rung queues, and unpublished outbox rows) as stats
// records of proc "broker", and runs sampleChannels beside it.
func sampleBroker(ctx context.Context, o options, s site, b *mq.Broker, db *sql.DB) {
	h, err := history.Create(filepath.Join(o.out, "broker.jsonl"), "broker")
	if err != nil {
		logf("field: soak sampler: %v", err)
		return
	}
	defer h.Close()
	done := make(chan struct{})
	go func() { defer close(done); sampleChannels(ctx, o.out, s) }()
	defer func() { <-done }()
	t := time.NewTicker(o.sample)
	defer t.Stop()
	q := s.names.Queues()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		c, cancel := context.WithTimeout(ctx, o.sample)
		st := history.Stats{Channels: -1}
		var rows int
		if db.QueryRowContext(c, "SELECT count(*) FROM "+s.names.Schema().Outbox).Scan(&rows) == nil {
			st.Backlog += rows
		}
		counts, _ := ops.Count(c, b, append([]string{q[0], q[1]}, q[6:]...)...) // those counted before a failure
		for _, qc := range counts {
			st.Backlog += qc.Ready
		}
		cancel()
		_ = h.Add(history.Record{Kind: history.KindStats, Stats: &st})
	}
}

// sampleChannels writes, every 30 s, the channels the broker lists on the
// workers' connections as stats records of proc "channels" (-1 when
// rabbitmqctl did not answer within a minute: on a loaded machine it takes
// 20 s, and a node may be down).
func sampleChannels(ctx context.Context, out string, s site) {
	h, err := history.Create(filepath.Join(out, "channels.jsonl"), "channels")
	if err != nil {
		logf("field: channel sampler: %v", err)
		return
	}
	defer h.Close()
	for {
		c, cancel := context.WithTimeout(ctx, time.Minute)
		n := channels(c, s)
		cancel()
		if ctx.Err() != nil {
			return
		}
		_ = h.Add(history.Record{Kind: history.KindStats, Stats: &history.Stats{Channels: n}})
		sleep(ctx, 30*time.Second)
	}
}

// channels sums the channels of the connections the workers named
// (ConnectionName is the worker's name), as the broker lists them.
func channels(ctx context.Context, s site) int {
	if len(s.ctl) == 0 {
		return -1
	}
	args := append(append([]string(nil), s.ctl[1:]...), "-q", "list_connections", "client_properties", "channels", "--no-table-headers")
	// The control forks (field.sh, chroot, rabbitmqctl's own wrapper): the
	// context's end kills the whole process group, and Wait gives up on the
	// output pipe 5 s later even if something still holds it open.
	cmd := exec.CommandContext(ctx, s.ctl[0], args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.Output()
	if err != nil {
		return -1
	}
	n := 0
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		// client_properties, a tab, channels; the properties carry
		// {"connection_name","relay1"}.
		props, count, ok := strings.Cut(sc.Text(), "\t")
		if !ok || strings.Contains(props, `{"connection_name","field-orchestrator"}`) {
			continue
		}
		if c, err := strconv.Atoi(strings.TrimSpace(count)); err == nil {
			n += c
		}
	}
	return n
}

// writeSoak writes the soak table: one row per bin (the sample interval,
// at least 15 s) with the workers' resources summed (the last sample of
// each worker in the bin), the broker's backlog and channels, and the
// largest consumer lag.
func writeSoak(path, out string, recs []history.Record, sample time.Duration) error {
	bin := sample
	if bin < 15*time.Second {
		bin = 15 * time.Second
	}
	var t0 time.Time
	type row struct {
		procs    map[string]history.Stats
		broker   *history.Stats
		channels int // -1: no sample in the bin
	}
	rows := map[int]*row{}
	for _, r := range recs {
		if r.Kind != history.KindStats || r.Stats == nil {
			continue
		}
		if t0.IsZero() {
			t0 = r.T
		}
		i := int(r.T.Sub(t0) / bin)
		if rows[i] == nil {
			rows[i] = &row{procs: map[string]history.Stats{}, channels: -1}
		}
		if r.Proc == "broker" {
			s := *r.Stats
			rows[i].broker = &s
			continue
		}
		if r.Proc == "channels" {
			if r.Stats.Channels >= 0 {
				rows[i].channels = r.Stats.Channels
			}
			continue
		}
		rows[i].procs[r.Proc] = *r.Stats
	}
	idx := make([]int, 0, len(rows))
	for i := range rows {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	w := bufio.NewWriter(f)
	fmt.Fprintln(w, "minute\tprocs\trss_mib\tgoroutines\tfds\tconns\tchannels\tbacklog\tlag_s\tdone")
	for _, i := range idx {
		r := rows[i]
		var rss, gor, fds, conns int64
		var lag, done int64
		for _, s := range r.procs {
			rss += s.RSSKiB
			gor += int64(s.Goroutines)
			fds += int64(s.FDs)
			conns += int64(s.Conns)
			done += s.Done
			if s.LagMS > lag {
				lag = s.LagMS
			}
		}
		ch, backlog := "NaN", "NaN"
		if r.broker != nil {
			backlog = strconv.Itoa(r.broker.Backlog)
		}
		if r.channels >= 0 {
			ch = strconv.Itoa(r.channels)
		}
		fmt.Fprintf(w, "%.2f\t%d\t%.1f\t%d\t%d\t%d\t%s\t%s\t%.1f\t%d\n", (time.Duration(i) * bin).Minutes(), len(r.procs), float64(rss)/1024, gor, fds, conns, ch, backlog, float64(lag)/1000, done)
	}
	return w.Flush()
}
