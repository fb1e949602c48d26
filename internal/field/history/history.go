package history

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"
)

// The kinds of Record a worker writes.
const (
	// KindStart: the process started (Proc, Role).
	KindStart = "start"
	// KindPublished: a plain publish the broker confirmed (ID, Expect).
	KindPublished = "published"
	// KindPublishFailed: a plain publish that returned an error (ID, Err);
	// it may or may not have reached the broker, so nothing is promised.
	KindPublishFailed = "publish-failed"
	// KindCommitted: an order whose transaction committed (ID, Key, Seq).
	KindCommitted = "committed"
	// KindRolledBack: an order whose transaction was rolled back on
	// purpose after its outbox row was written (ID, Key, Seq).
	KindRolledBack = "rolledback"
	// KindCommitUnknown: a commit that returned an error: the database
	// (its orders table) says whether it happened.
	KindCommitUnknown = "commit-unknown"
	// KindHandled: the scripted handler finished a message (ID, Attempt).
	KindHandled = "handled"
	// KindAttempt: the scripted handler failed an attempt on purpose.
	KindAttempt = "attempt"
	// KindRungHop: the library republished a message (ID) to a broker
	// rung (Queue) and the broker confirmed it: from here the message
	// waits out the rung's TTL in that queue (a durable rung, a quorum
	// queue, or in the classic mode a classic one).
	KindRungHop = "rung-hop"
	// KindEffect: the inbox handler wrote an order's effect in the
	// inbox's transaction (ID, Key, Seq); whether it committed is the
	// database's to say, this is the history's view only.
	KindEffect = "effect"
	// KindStats: a sample of the process's resources (Stats).
	KindStats = "stats"
	// KindError: something the worker could not do (Err).
	KindError = "error"
)

// Record is one line of a worker's history.
type Record struct {
	T       time.Time `json:"t"`
	Proc    string    `json:"proc"`
	Kind    string    `json:"kind"`
	ID      string    `json:"id,omitempty"`
	Key     string    `json:"key,omitempty"`
	Seq     int       `json:"seq,omitempty"`
	Expect  string    `json:"expect,omitempty"`
	Attempt int       `json:"attempt,omitempty"`
	Queue   string    `json:"queue,omitempty"`
	// Redelivered: the delivery a handler ran on came redelivered (the
	// broker had sent it before, to this consumer or another).
	Redelivered bool   `json:"redelivered,omitempty"`
	Err         string `json:"err,omitempty"`
	Stats       *Stats `json:"stats,omitempty"`
}

// Stats is one sample of a worker process's resources, for the soak.
type Stats struct {
	RSSKiB     int64 `json:"rss_kib"`
	Goroutines int   `json:"goroutines"`
	FDs        int   `json:"fds"`
	// Sockets is how many of the FDs are sockets (the AMQP connections
	// and the database's).
	Sockets int `json:"sockets"`
	// Conns is how many of the process's TCP sockets are established to
	// an AMQP port (its broker connections).
	Conns int `json:"conns"`
	// LagMS is the age of the last message handled when it was handled
	// (consumer lag), 0 for a role that consumes nothing.
	LagMS int64 `json:"lag_ms"`
	// Done counts what the role finished so far (published, committed,
	// handled or effects).
	Done int64 `json:"done"`
	// Backlog and Channels are the orchestrator's samples of the broker
	// (proc "broker"): messages ready in the work, inbox and rung queues
	// plus outbox rows not yet published; channels open on the workers'
	// connections (-1: the broker did not answer in time).
	Backlog  int `json:"backlog,omitempty"`
	Channels int `json:"channels,omitempty"`
}

// The ends a scripted message may reach.
const (
	EndHandled = "handled"
	EndDLQ     = "dlq"
	EndParked  = "parked"
)

// Writer appends Records to one file. Safe for concurrent use.
type Writer struct {
	mu   sync.Mutex
	f    *os.File
	proc string
}

// Create opens (appending, creating it) the history file path for the
// process proc.
func Create(path, proc string) (*Writer, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	return &Writer{f: f, proc: proc}, nil
}

// Add stamps r with the time (when unset) and the process, and appends it.
func (w *Writer) Add(r Record) error {
	if r.T.IsZero() {
		r.T = time.Now()
	}
	r.Proc = w.proc
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	w.mu.Lock()
	defer w.mu.Unlock()
	_, err = w.f.Write(b)
	return err
}

// Close closes the file.
func (w *Writer) Close() error { return w.f.Close() }

// Read returns every Record of every *.jsonl file in dir, in time order.
// A line that is not JSON (a torn last line) is skipped.
func Read(dir string) ([]Record, error) {
	var all []Record
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || !strings.HasSuffix(p, ".jsonl") {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<16), 1<<20)
		for sc.Scan() {
			var r Record
			if json.Unmarshal(sc.Bytes(), &r) == nil {
				all = append(all, r)
			}
		}
		if err := sc.Err(); err != nil && !errors.Is(err, bufio.ErrTooLong) {
			return fmt.Errorf("%s: %w", p, err)
		}
		return nil
	})
	sort.SliceStable(all, func(i, j int) bool { return all[i].T.Before(all[j].T) })
	return all, err
}
