package main

import (
	"bufio"
	"context"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/acemq/acemq-go/internal/field/history"
)

// stats writes a stats line every interval until ctx ends.
func (p *proc) stats(ctx context.Context, every time.Duration, ports map[int]bool) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s := history.Stats{RSSKiB: rss(), Goroutines: runtime.NumGoroutine(), LagMS: p.lagMS.Load(), Done: p.done.Load()}
		socks := map[string]bool{}
		if ents, err := os.ReadDir("/proc/self/fd"); err == nil {
			s.FDs = len(ents)
			for _, e := range ents {
				if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && strings.HasPrefix(l, "socket:[") {
					socks[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
				}
			}
		}
		s.Sockets = len(socks)
		s.Conns = amqpConns(socks, ports)
		_ = p.hist.Add(history.Record{Kind: history.KindStats, Stats: &s})
	}
}

// rss is the process's resident set in KiB (VmRSS), 0 when unknown.
func rss() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			n, _ := strconv.ParseInt(f[1], 10, 64)
			return n
		}
	}
	return 0
}

// amqpConns counts the established TCP connections among the sockets
// (inodes) whose remote port is one of ports.
func amqpConns(socks map[string]bool, ports map[int]bool) int {
	n := 0
	for _, file := range []string{"/proc/self/net/tcp", "/proc/self/net/tcp6"} {
		f, err := os.Open(file)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Scan() // header
		for sc.Scan() {
			fl := strings.Fields(sc.Text())
			if len(fl) < 10 || fl[3] != "01" || !socks[fl[9]] {
				continue
			}
			i := strings.LastIndexByte(fl[2], ':')
			port, err := strconv.ParseInt(fl[2][i+1:], 16, 32)
			if err == nil && ports[int(port)] {
				n++
			}
		}
		f.Close()
	}
	return n
}

// portsOf parses "5701,5702".
func portsOf(s string) map[int]bool {
	m := map[int]bool{}
	for _, f := range strings.Split(s, ",") {
		if n, err := strconv.Atoi(strings.TrimSpace(f)); err == nil {
			m[n] = true
		}
	}
	return m
}
