package main

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/acemq/acemq-go/internal/tcpproxy"
)

// worker is one fieldworker process under supervision: started again
// (after a second) whenever it exits while the run wants it.
type worker struct {
	name, role string
	env        []string
	out        string

	mu     sync.Mutex
	cmd    *exec.Cmd
	want   bool
	exited chan struct{} // closed when the current process has exited
	starts int
}

// fleet is the run's worker processes, the proxies they reach the nodes
// through (so a connection cut is a cut of the client's TCP connections,
// whatever the fault script can do), and the kills done to them.
type fleet struct {
	bin     string
	out     string
	workers []*worker
	proxies []*tcpproxy.Proxy
	rnd     *rand.Rand
	logf    func(format string, args ...any)

	mu       sync.Mutex
	kills    int
	restarts int
	cuts     int
}

// startProxies starts one proxy per AMQP URL and returns the URLs that go
// through them.
func (f *fleet) startProxies(urls []string) ([]string, error) {
	var out []string
	for _, u := range urls {
		host, rest, ok := strings.Cut(strings.TrimPrefix(u, "amqp://"), "@")
		if !ok {
			return nil, fmt.Errorf("want amqp://user:pass@host:port/vhost, got %s", u)
		}
		addr, vhost, _ := strings.Cut(rest, "/")
		p, err := tcpproxy.Start(addr)
		if err != nil {
			return nil, err
		}
		f.proxies = append(f.proxies, p)
		out = append(out, "amqp://"+host+"@"+p.Addr()+"/"+vhost)
	}
	return out, nil
}

// add defines a worker (not started).
func (f *fleet) add(name, role string, env []string) *worker {
	w := &worker{name: name, role: role, env: env, out: f.out}
	f.workers = append(f.workers, w)
	return w
}

// start starts w and keeps it running until stop.
func (f *fleet) start(w *worker) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.want = true
	return f.spawn(w)
}

// spawn starts w's process and the goroutine that starts it again when it
// exits. w.mu is held: stop, which clears want under it, either sees this
// process or keeps the next one from starting.
func (f *fleet) spawn(w *worker) error {
	logf, err := os.OpenFile(filepath.Join(w.out, w.name+".log"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(f.bin)
	cmd.Env = append(os.Environ(), w.env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	exited := make(chan struct{})
	w.cmd, w.exited = cmd, exited
	w.starts++
	go func() {
		err := cmd.Wait()
		logf.Close()
		close(exited)
		w.mu.Lock()
		again := w.want
		w.mu.Unlock()
		if !again {
			return
		}
		f.logf("field: %s exited (%v); starting it again", w.name, err)
		time.Sleep(time.Second)
		w.mu.Lock()
		defer w.mu.Unlock()
		if !w.want {
			return
		}
		f.mu.Lock()
		f.restarts++
		f.mu.Unlock()
		if err := f.spawn(w); err != nil {
			f.logf("field: start %s again: %v", w.name, err)
		}
	}()
	return nil
}

// Kill sends SIGKILL to one process of role ("relay", "consumer" (the
// worker or the inbox), or a worker's own name); it is started again by
// its supervisor.
func (f *fleet) Kill(role string) error {
	var pick []*worker
	for _, w := range f.workers {
		if w.name == role || w.role == role || (role == "consumer" && (w.role == "worker" || w.role == "inbox")) {
			pick = append(pick, w)
		}
	}
	if len(pick) == 0 {
		return fmt.Errorf("no process of role %q", role)
	}
	f.mu.Lock()
	w := pick[f.rnd.IntN(len(pick))]
	f.kills++
	f.mu.Unlock()
	w.mu.Lock()
	cmd := w.cmd
	w.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return fmt.Errorf("%s is not running", w.name)
	}
	f.logf("field: SIGKILL %s (pid %d)", w.name, cmd.Process.Pid)
	return cmd.Process.Signal(syscall.SIGKILL)
}

// CutConnections closes every worker's broker connections (TCP) at once.
func (f *fleet) CutConnections() error {
	n := 0
	for _, p := range f.proxies {
		n += p.Cut()
	}
	f.mu.Lock()
	f.cuts++
	f.mu.Unlock()
	f.logf("field: cut %d connections", n)
	return nil
}

// stop ends the named workers (all when none named): SIGTERM, SIGKILL
// after grace.
func (f *fleet) stop(grace time.Duration, names ...string) {
	var wg sync.WaitGroup
	for _, w := range f.workers {
		if len(names) > 0 && !contains(names, w.name) && !contains(names, w.role) {
			continue
		}
		w.mu.Lock()
		w.want = false
		cmd, exited := w.cmd, w.exited
		w.mu.Unlock()
		if cmd == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-exited:
			case <-time.After(grace):
				f.logf("field: %s did not stop within %s; SIGKILL", w.name, grace)
				_ = cmd.Process.Signal(syscall.SIGKILL)
				<-exited
			}
		}()
	}
	wg.Wait()
}

func (f *fleet) close() {
	f.stop(5 * time.Second)
	for _, p := range f.proxies {
		p.Close()
	}
}

func contains(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}
