package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/acemq/acemq-go/internal/field/history"
	"github.com/acemq/acemq-go/internal/field/workload"
	"github.com/acemq/acemq-go/mq"
)

type proc struct {
	role, name string
	urls       []string
	pg         string
	names      workload.Names
	hist       *history.Writer
	log        *slog.Logger
	rate       float64
	done       atomic.Int64
	lagMS      atomic.Int64
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "fieldworker:", err)
		os.Exit(1)
	}
}

func run() error {
	p := &proc{
		role:  os.Getenv("FIELD_ROLE"),
		name:  os.Getenv("FIELD_PROC"),
		urls:  strings.Split(os.Getenv("FIELD_URLS"), ","),
		pg:    os.Getenv("FIELD_PG"),
		names: workload.Names{Prefix: os.Getenv("FIELD_PREFIX"), Tables: os.Getenv("FIELD_TABLES"), ClassicRungs: os.Getenv("FIELD_RUNGS") == "classic"},
		rate:  5,
	}
	if p.name == "" {
		p.name = p.role
	}
	if r, err := strconv.ParseFloat(os.Getenv("FIELD_RATE"), 64); err == nil && r > 0 {
		p.rate = r
	}
	every := 5 * time.Second
	if d, err := time.ParseDuration(os.Getenv("FIELD_STATS")); err == nil && d > 0 {
		every = d
	}
	p.log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("proc", p.name)
	h, err := history.Create(os.Getenv("FIELD_HISTORY"), p.name)
	if err != nil {
		return err
	}
	defer h.Close()
	p.hist = h
	_ = h.Add(history.Record{Kind: history.KindStart, Key: p.role})

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	// The stats goroutine ends before the history closes, on every return.
	statsDone := make(chan struct{})
	go func() { defer close(statsDone); p.stats(ctx, every, portsOf(os.Getenv("FIELD_AMQP_PORTS"))) }()
	defer func() { stop(); <-statsDone }()

	var db *sql.DB
	if p.role != "publisher" && p.role != "worker" {
		if db, err = sql.Open("pgx", p.pg); err != nil {
			return err
		}
		db.SetMaxOpenConns(4)
		defer db.Close()
	}
	if p.role == "writer" {
		return p.writer(ctx, db)
	}
	// Every hop to a broker rung the broker confirmed goes to the history:
	// the checker needs it to tell a loss the contract forces (RungLoss)
	// from one it does not.
	b, err := workload.NewBroker(ctx, p.urls, p.name, p.log, p.names.RungHook(func(id, rung string) {
		_ = p.hist.Add(history.Record{Kind: history.KindRungHop, ID: id, Queue: rung})
	}))
	if err != nil {
		return err
	}
	defer func() {
		c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = b.Close(c)
	}()
	switch p.role {
	case "relay":
		if err := p.names.RunRelay(ctx, db, b); err != nil && !errors.Is(err, context.Canceled) {
			return err
		}
		return nil
	case "publisher":
		return p.publisher(ctx, b)
	case "worker":
		c, err := p.names.ConsumeWork(ctx, b, p.work)
		if err != nil {
			return err
		}
		return p.wait(ctx, c)
	case "inbox":
		c, err := p.names.ConsumeInbox(ctx, b, db, p.effect)
		if err != nil {
			return err
		}
		return p.wait(ctx, c)
	}
	return fmt.Errorf("unknown FIELD_ROLE %q", p.role)
}

type stopper interface {
	Stop(ctx context.Context) error
	Done() <-chan struct{}
	Err() error
}

// wait runs until ctx ends (then drains c) or c ends by itself (an error).
func (p *proc) wait(ctx context.Context, c stopper) error {
	select {
	case <-ctx.Done():
		sc, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		return c.Stop(sc)
	case <-c.Done():
		return fmt.Errorf("consumer ended: %v", c.Err())
	}
}

// tick paces a loop at p.rate per second until ctx ends.
func (p *proc) tick(ctx context.Context) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(time.Duration(float64(time.Second) / p.rate)):
		return true
	}
}

// writer commits orders at p.rate, each key's sequence numbers rising in
// commit order (one loop: a key's next order is written after the last
// committed). It starts each key after the highest sequence the table
// holds, so a restart goes on where it was.
func (p *proc) writer(ctx context.Context, db *sql.DB) error {
	ow := p.names.OrderWriter()
	next := map[string]int{}
	for {
		rows, err := db.QueryContext(ctx, "SELECT key, max(seq) FROM "+p.names.OrdersTable()+" GROUP BY key")
		if err == nil {
			for rows.Next() {
				var k string
				var s int
				if rows.Scan(&k, &s) == nil {
					next[k] = s + 1
				}
			}
			rows.Close()
			break
		}
		p.errorf("read sequences: %v", err)
		if !p.tick(ctx) {
			return nil
		}
	}
	run := strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
	n := 0
	for p.tick(ctx) {
		k := fmt.Sprintf("k%d", rand.IntN(workload.Keys))
		if next[k] == 0 {
			next[k] = 1
		}
		n++
		o := workload.OrderEvent{ID: fmt.Sprintf("o-%s-%d-%s-%d", k, next[k], run, n), Key: k, Seq: next[k]}
		rollback := rand.IntN(10) == 0
		err := p.order(ctx, db, ow, o, rollback)
		switch {
		case err == nil && rollback:
			_ = p.hist.Add(history.Record{Kind: history.KindRolledBack, ID: o.ID, Key: o.Key, Seq: o.Seq})
		case err == nil:
			p.done.Add(1)
			_ = p.hist.Add(history.Record{Kind: history.KindCommitted, ID: o.ID, Key: o.Key, Seq: o.Seq})
		case errors.Is(err, errCommit):
			_ = p.hist.Add(history.Record{Kind: history.KindCommitUnknown, ID: o.ID, Key: o.Key, Seq: o.Seq, Err: err.Error()})
		default:
			p.errorf("order %s: %v", o.ID, err)
			continue // nothing written: the same sequence number again
		}
		next[k]++
	}
	return nil
}

var errCommit = errors.New("commit")

// order writes o in a transaction of its own and commits it, or rolls it
// back when asked to (after its outbox row was written).
func (p *proc) order(ctx context.Context, db *sql.DB, w workload.OrderWriter, o workload.OrderEvent, rollback bool) error {
	c, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	tx, err := db.BeginTx(c, nil)
	if err != nil {
		return err
	}
	if err := w.Write(c, tx, o); err != nil {
		_ = tx.Rollback()
		return err
	}
	if rollback {
		return tx.Rollback()
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("%w: %v", errCommit, err)
	}
	return nil
}

// publisher publishes scripted messages at p.rate, each publish in a
// goroutine of its own (a confirm may wait out a partition), at most 64 at
// once; on SIGTERM it waits for those in flight (each bounded by 3 min).
func (p *proc) publisher(ctx context.Context, b *mq.Broker) error {
	pub := p.names.ScriptPublisher(b)
	run := strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
	slots := make(chan struct{}, 64)
	var wg sync.WaitGroup
	defer wg.Wait()
	for n := 1; p.tick(ctx); n++ {
		s := workload.Script{ID: fmt.Sprintf("m-%s-%s-%d", p.name, run, n)}
		switch r := rand.IntN(100); {
		case r < 60:
		case r < 75:
			s.Fail = 1 // one in-process wait
		case r < 85:
			s.Fail = 2 // then the broker rung
		case r < 92:
			s.Fail = workload.WorkAttempts // exhausted: .dlq
		default:
			s.Park = true
		}
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return nil
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			c, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			if err := pub.Publish(c, s); err != nil {
				_ = p.hist.Add(history.Record{Kind: history.KindPublishFailed, ID: s.ID, Expect: s.End(), Err: err.Error()})
				return
			}
			p.done.Add(1)
			_ = p.hist.Add(history.Record{Kind: history.KindPublished, ID: s.ID, Expect: s.End()})
		}()
	}
	return nil
}

// work is the scripted handler: it fails the message's first Fail
// attempts, or parks it.
func (p *proc) work(_ context.Context, d workload.Delivery) error {
	var s workload.Script
	if err := json.Unmarshal(d.Body, &s); err != nil {
		p.errorf("%s: not a script: %v", d.ID, err)
		return err
	}
	if s.Park {
		_ = p.hist.Add(history.Record{Kind: history.KindAttempt, ID: s.ID, Attempt: d.Attempt, Expect: history.EndParked})
		return workload.ParkError(s.ID)
	}
	if d.Attempt <= s.Fail {
		_ = p.hist.Add(history.Record{Kind: history.KindAttempt, ID: s.ID, Attempt: d.Attempt})
		return fmt.Errorf("field: script fails attempt %d of %s", d.Attempt, s.ID)
	}
	p.seen(d)
	return p.hist.Add(history.Record{Kind: history.KindHandled, ID: s.ID, Attempt: d.Attempt})
}

// effect writes the order's effect in the inbox's transaction.
func (p *proc) effect(ctx context.Context, tx *sql.Tx, d workload.Delivery) error {
	var o workload.OrderEvent
	if err := json.Unmarshal(d.Body, &o); err != nil {
		p.errorf("%s: not an order: %v", d.ID, err)
		return err
	}
	if err := p.names.Effect(ctx, tx, o); err != nil {
		return err
	}
	p.seen(d)
	return p.hist.Add(history.Record{Kind: history.KindEffect, ID: o.ID, Key: o.Key, Seq: o.Seq, Attempt: d.Attempt, Redelivered: d.Redelivered})
}

func (p *proc) seen(d workload.Delivery) {
	p.done.Add(1)
	if !d.Timestamp.IsZero() {
		p.lagMS.Store(time.Since(d.Timestamp).Milliseconds())
	}
}

func (p *proc) errorf(format string, args ...any) {
	_ = p.hist.Add(history.Record{Kind: history.KindError, Err: fmt.Sprintf(format, args...)})
}
