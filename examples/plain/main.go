package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"time"

	"github.com/lmittmann/tint"

	"github.com/acemq/acemq-go/middleware"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/ops"
	"github.com/acemq/acemq-go/retry"
	"github.com/acemq/acemq-go/topology"
)

func main() {
	log := slog.New(tint.NewTextHandler(os.Stderr, &tint.Options{Level: slog.LevelInfo, TimeFormat: "15:04:05.000"}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, log); err != nil {
		log.Error("plain example failed", "error", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, log *slog.Logger) error {
	url := os.Getenv("AMQP_URL")
	if url == "" {
		url = "amqp://guest:guest@127.0.0.1:5672/"
	}
	// PLAIN_PREFIX puts a prefix on the queue's name (the test that runs the
	// example uses goit.*, so it can share a broker).
	queue := os.Getenv("PLAIN_PREFIX") + "plain.orders"
	// Three deliveries: two short waits in-process, none on the broker; a
	// longer ladder would add rungs plain.orders.retry.<wait>.
	policy := retry.Waits(100*time.Millisecond, 200*time.Millisecond)

	b := mq.New(mq.Config{URLs: []string{url}, ConnectionName: "acemq-plain-example", Logger: log})
	startCtx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := b.Start(startCtx); err != nil {
		return err
	}
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		cleanup(closeCtx, b, queue, log)
		_ = b.Close(closeCtx)
	}()

	t := topology.New().Queue(queue, topology.DeadLetter(), topology.Retry(policy))
	fmt.Print(t)
	if err := b.Declare(startCtx, t); err != nil {
		return err
	}

	var wg sync.WaitGroup
	wg.Add(5)
	tries := map[string]int{}
	var mu sync.Mutex
	handler := mq.HandlerFunc(func(ctx context.Context, d *mq.Delivery) error {
		mu.Lock()
		tries[d.MessageId]++
		n := tries[d.MessageId]
		mu.Unlock()
		body := string(d.Body)
		switch {
		case strings.HasPrefix(body, "malformed"):
			defer wg.Done()
			return middleware.Park(errors.New("order has no items"))
		case strings.HasPrefix(body, "flaky") && n < 3:
			return fmt.Errorf("stock service timed out (try %d)", n)
		}
		log.Info("order shipped", "order", body, "attempt", d.Attempt())
		wg.Done()
		return nil
	})
	c, err := b.Consume(startCtx, queue, handler, middleware.StandardDeclared()) // the policy declared above
	if err != nil {
		return err
	}

	p := b.Publisher("") // the default exchange: the routing key is the queue
	defer p.Close()
	for _, order := range []string{"order-1", "flaky-2", "order-3", "malformed-4", "order-5"} {
		if err := p.Publish(ctx, queue, mq.Message{Body: []byte(order), ContentType: "text/plain"}); err != nil {
			return err
		}
	}

	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		return errors.New("orders were not all handled within 20 s")
	case <-ctx.Done():
	}
	stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Stop(stopCtx); err != nil {
		return err
	}
	if counts, err := ops.Count(stopCtx, b, topology.ParkedQueue(queue)); err == nil {
		log.Info("done", "parked", counts[0].Ready)
	}
	return nil
}

// cleanup deletes what the example declared, so it leaves nothing behind.
func cleanup(ctx context.Context, b *mq.Broker, queue string, log *slog.Logger) {
	for _, q := range []string{queue, topology.DeadLetterQueue(queue), topology.ParkedQueue(queue)} {
		if _, err := b.DeleteQueue(ctx, q); err != nil {
			log.Warn("cleanup", "queue", q, "error", err)
		}
	}
}
