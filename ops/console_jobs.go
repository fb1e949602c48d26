package ops

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// keptJobs is how many finished replays the console remembers.
const keptJobs = 50

// consoleJob is one replay the console runs: Replay on a goroutine the
// console owns, its progress readable while it runs, stoppable.
type consoleJob struct {
	ID, Source, Kind, Queue, Label string
	Started                        time.Time
	cancel                         context.CancelFunc

	mu       sync.Mutex
	state    jobState
	finished chan struct{}
}

// jobState is a job's progress, copied out under its lock.
type jobState struct {
	Done, Total, Moved, Skipped, Left int
	Finished, Stopped                 bool
	Error                             string
	Ended                             time.Time
}

func (j *consoleJob) snapshot() jobState {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.state
}

func (c *Console) startJob(source, kind, queue, label, client string, opts ReplayOptions) (*consoleJob, error) {
	var raw [8]byte
	_, _ = rand.Read(raw[:])
	j := &consoleJob{ID: hex.EncodeToString(raw[:]), Source: source, Kind: kind, Queue: queue, Label: label, Started: time.Now(), finished: make(chan struct{})}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, errors.New("the console is closing")
	}
	if r := c.runningLocked(queue); r != nil {
		c.mu.Unlock()
		return nil, fmt.Errorf("a replay of %s is running (%s): wait for it or stop it", queue, r.Label)
	}
	ctx, cancel := context.WithCancel(c.ctx)
	j.cancel = cancel
	c.jobs[j.ID] = j
	c.order = append(c.order, j.ID)
	for len(c.order) > keptJobs {
		old := c.jobs[c.order[0]]
		if !old.snapshot().Finished {
			break // never forget a running job
		}
		delete(c.jobs, c.order[0])
		c.order = c.order[1:]
	}
	c.wg.Add(1)
	c.mu.Unlock()

	opts.Progress = func(done, total int) {
		j.mu.Lock()
		j.state.Done, j.state.Total = done, total
		j.mu.Unlock()
	}
	c.log.Info("acemq.console.replay.started", "queue", queue, "what", label, "job", j.ID, "client", client)
	go func() {
		defer c.wg.Done()
		defer cancel()
		defer close(j.finished)
		c.forget(queue)
		res, err := Replay(ctx, c.b, queue, opts)
		c.forget(queue)
		j.mu.Lock()
		j.state.Done, j.state.Total = res.Taken, res.Total
		j.state.Moved, j.state.Skipped, j.state.Left = res.Moved, len(res.Skipped), res.Unmatched
		j.state.Finished, j.state.Ended = true, time.Now()
		j.state.Stopped = errors.Is(err, context.Canceled)
		j.state.Error = errText(err)
		j.mu.Unlock()
		if err != nil {
			c.log.Warn("acemq.console.replay.stopped", "queue", queue, "job", j.ID, "moved", res.Moved, "error", err)
			return
		}
		c.log.Info("acemq.console.replay.done", "queue", queue, "job", j.ID, "moved", res.Moved, "skipped", len(res.Skipped))
	}()
	return j, nil
}

// running is the replay running on queue, if any.
func (c *Console) running(queue string) *consoleJob {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.runningLocked(queue)
}

func (c *Console) runningLocked(queue string) *consoleJob {
	for _, j := range c.jobs {
		if j.Queue == queue && !j.snapshot().Finished {
			return j
		}
	}
	return nil
}

func (c *Console) job(w http.ResponseWriter, r *http.Request) *consoleJob {
	c.mu.Lock()
	j := c.jobs[r.PathValue("id")]
	c.mu.Unlock()
	if j == nil {
		c.fail(w, r, http.StatusNotFound, fmt.Errorf("no such replay (the console remembers the last %d)", keptJobs))
	}
	return j
}

// recentJobs are the jobs remembered, newest first.
func (c *Console) recentJobs() []jobView {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]jobView, 0, len(c.order))
	for i := len(c.order) - 1; i >= 0; i-- {
		j := c.jobs[c.order[i]]
		out = append(out, jobView{j, j.snapshot()})
	}
	return out
}

// jobView is a job and its state, for a template.
type jobView struct {
	*consoleJob
	S jobState
}

func (c *Console) jobPage(w http.ResponseWriter, r *http.Request) {
	if j := c.job(w, r); j != nil {
		c.render(w, r, "job", map[string]any{"J": jobView{j, j.snapshot()}})
	}
}

func (c *Console) apiJob(w http.ResponseWriter, r *http.Request) {
	if j := c.job(w, r); j != nil {
		s := j.snapshot()
		writeJSON(w, map[string]any{"done": s.Done, "total": s.Total, "moved": s.Moved, "skipped": s.Skipped,
			"left": s.Left, "finished": s.Finished, "stopped": s.Stopped, "error": s.Error})
	}
}

func (c *Console) stopJob(w http.ResponseWriter, r *http.Request) {
	if !c.action(w, r) {
		return
	}
	if j := c.job(w, r); j != nil {
		j.cancel()
		select {
		case <-j.finished:
		case <-time.After(5 * time.Second):
		case <-r.Context().Done():
		}
		http.Redirect(w, r, c.link("jobs", j.ID), http.StatusSeeOther)
	}
}
