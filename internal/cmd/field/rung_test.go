//go:build field

package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acemq/acemq-go/middleware"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/retry"
	"github.com/acemq/acemq-go/topology"
)

// TestRungAcrossPartition is seed 101525401's loss made small: a message
// waits in a broker rung (a classic queue, on the node it was declared
// from) when that node is partitioned from the other two, which hold the
// home quorum queue's majority; the rung's TTL expires during the cut. The
// library promises the message comes home and is handled (or set aside):
// it must be somewhere when the cut is healed.
//
//	go test -tags field -run TestRungAcrossPartition -timeout 10m -v ./internal/cmd/field
func TestRungAcrossPartition(t *testing.T) {
	root, _ := filepath.Abs("../../..")
	script := filepath.Join(root, "scripts", "field.sh")
	sh := func(args ...string) string {
		t.Helper()
		c := exec.Command(script, args...)
		c.Dir, c.Stderr = root, os.Stderr
		out, err := c.Output()
		if err != nil {
			t.Fatalf("field.sh %v: %v", args, err)
		}
		return strings.TrimSpace(string(out))
	}
	sh("up")
	t.Cleanup(func() { _ = exec.Command(script, "heal").Run() })
	urls := strings.Split(sh("urls"), ",")
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()

	q := fmt.Sprintf("rungcut.%d", time.Now().UnixNano())
	policy := retry.Exponential(2, 5*time.Second, retry.InProcessLimit(time.Second)) // one wait: the rung q.retry.5s
	// Declared through f1 only: the rung and the home queue's first leader on f1.
	admin := mq.New(mq.Config{URLs: urls[:1], ConnectionName: "rungcut-admin"})
	if err := admin.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	if err := admin.Declare(ctx, topology.New().Queue(q, topology.Retry(policy))); err != nil {
		t.Fatal(err)
	}
	rung := topology.RungQueue(q, 5*time.Second)
	t.Cleanup(func() {
		c, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, x := range []string{q, rung, topology.DeadLetterQueue(q), topology.ParkedQueue(q)} {
			_, _ = admin.DeleteQueue(c, x)
		}
	})

	// The consumer and the publisher on all three nodes, as a service.
	b := mq.New(mq.Config{URLs: urls, ConnectionName: "rungcut"})
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer b.Close(context.Background())
	var mu sync.Mutex
	attempts := map[int]time.Time{}
	c, err := b.Consume(ctx, q, mq.HandlerFunc(func(ctx context.Context, d *mq.Delivery) error {
		mu.Lock()
		attempts[d.Attempt()] = time.Now()
		mu.Unlock()
		if d.Attempt() == 1 {
			return fmt.Errorf("fail attempt 1: to the rung")
		}
		return nil
	}), middleware.Standard(policy))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop(context.Background())
	if err := b.Publisher("").Publish(ctx, q, mq.Message{Body: []byte("m")}); err != nil {
		t.Fatal(err)
	}
	// Once the hop to the rung is confirmed (attempt 1 acknowledged), cut
	// f1 (the rung's node) from f2 and f3 for longer than the rung's TTL.
	for {
		n, err := admin.MessageCount(ctx, rung)
		if err == nil && n == 1 {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the message never reached the rung")
		}
		time.Sleep(50 * time.Millisecond)
	}
	sh("partition", "f1", "f2,f3")
	t.Logf("%s: message in %s; f1 cut from f2,f3", time.Now().Format("15:04:05.000"), rung)
	time.Sleep(30 * time.Second)
	sh("heal")
	t.Logf("%s: healed", time.Now().Format("15:04:05.000"))

	deadline := time.Now().Add(3 * time.Minute)
	for time.Now().Before(deadline) {
		mu.Lock()
		_, done := attempts[2]
		mu.Unlock()
		if done {
			return
		}
		time.Sleep(time.Second)
	}
	where := map[string]int{}
	for _, x := range []string{q, rung, topology.DeadLetterQueue(q)} {
		n, err := admin.MessageCount(ctx, x)
		if err != nil {
			n = -1
		}
		where[x] = n
	}
	t.Fatalf("the message that waited in %s across the cut never came home: not handled 3 min after the heal; ready counts %v", rung, where)
}
