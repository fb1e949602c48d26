//go:build integration

package integration

// Issue 11, items 3 and 4: a connection or subscription that dies soon
// after it came up counts as a failed attempt, so a flapping endpoint or a
// poison message at the head of a queue is not stormed; each is said once
// in a named event.

import (
	"context"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/internal/testenv"
	"github.com/acemq/acemq-go/mq"
)

// hardDefaults is the library's own reconnect backoff (testenv.Broker
// shortens it otherwise).
var hardDefaults = mq.Config{ReconnectMin: 100 * time.Millisecond, ReconnectMax: 10 * time.Second}

// An endpoint that completes every AMQP handshake and then drops the
// connection: fewer than 20 dials in 10 s, one acemq.connection.flapping
// with the last error, and the connection back once the endpoint behaves.
func TestHardeningFlappingEndpoint(t *testing.T) {
	testenv.NoLeaks(t)
	b, proxy, lg := hardBroker(t, hardDefaults)
	ctx := testenv.Context(t, 60*time.Second)
	q := coreQueue(t, b, nil)
	before := proxy.Opened()
	proxy.FlapAfterHandshake(true)
	proxy.Cut()
	time.Sleep(10 * time.Second)
	dials := proxy.Opened() - before
	proxy.FlapAfterHandshake(false)
	if dials >= 20 {
		t.Errorf("%d connections opened in 10 s against a flapping endpoint; want fewer than 20", dials)
	}
	if dials < 3 {
		t.Errorf("only %d connections opened in 10 s: the supervisor stopped trying?", dials)
	}
	flapping := lg.All(mq.EventConnectionFlapping)
	if len(flapping) != 1 {
		t.Errorf("%d %s records; want exactly 1", len(flapping), mq.EventConnectionFlapping)
	} else if !strings.Contains(flapping[0].String(), "error=") {
		t.Errorf("the flapping record does not carry the last error: %v", flapping[0])
	}
	t.Logf("flapping endpoint: %d connections opened in 10 s (%d losses logged)", dials, lg.Count(mq.EventConnectionLost))
	start := time.Now()
	if err := b.Publisher("").Publish(ctx, q, mq.Message{Body: []byte("back")}); err != nil {
		t.Fatalf("publish once the endpoint behaves: %v", err)
	}
	t.Logf("publishing again %v after the endpoint stopped flapping", time.Since(start).Round(time.Millisecond))
}

// A message another client published that amqp091-go cannot decode
// (headers nested 33 deep) kills the connection of every consumer of it
// on delivery, whatever this library validates. The consumer backs off
// (fewer than 20 deliveries in 10 s), and acemq.consumer.poison names the
// queue, once.
func TestHardeningPoisonMessage(t *testing.T) {
	testenv.NoLeaks(t)
	direct := testenv.Broker(t, mq.Config{})
	q := coreQueue(t, direct, nil)
	ctx := testenv.Context(t, 60*time.Second)

	// Another client, which validates nothing: raw amqp091-go.
	conn, err := amqp.Dial(testenv.URL())
	if err != nil {
		t.Fatal(err)
	}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	var v any = "leaf"
	for range 32 + 1 {
		v = amqp.Table{"n": v}
	}
	if err := ch.PublishWithContext(ctx, "", q, false, false, amqp.Publishing{Headers: amqp.Table{"deep": v}, Body: []byte("poison")}); err != nil {
		t.Fatal(err)
	}
	_ = conn.Close()
	testenv.WaitCount(t, direct, q, 1, 5*time.Second)

	b, proxy, lg := hardBroker(t, hardDefaults)
	before := proxy.Opened()
	handled := make(chan struct{}, 1)
	c, err := b.Consume(ctx, q, mq.HandlerFunc(func(context.Context, *mq.Delivery) error {
		handled <- struct{}{}
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Second)
	dials := proxy.Opened() - before
	interrupted := lg.Count("acemq.consumer.interrupted")
	if dials >= 20 || interrupted >= 20 {
		t.Errorf("in 10 s: %d connections, %d interruptions; want fewer than 20", dials, interrupted)
	}
	if interrupted < 3 {
		t.Errorf("only %d interruptions in 10 s: was the message not poison?", interrupted)
	}
	poison := lg.All(mq.EventConsumerPoison)
	if len(poison) != 1 {
		t.Errorf("%d %s records; want 1", len(poison), mq.EventConsumerPoison)
	} else if !strings.Contains(poison[0].String(), q) {
		t.Errorf("the record does not name the queue %s: %v", q, poison[0])
	}
	select {
	case <-handled:
		t.Error("the poison message reached the handler")
	default:
	}
	t.Logf("poison message: %d connections, %d interruptions in 10 s; %s", dials, interrupted, lg.Events())
	// Removing the message (here: purging the queue) ends it.
	if _, err := direct.DeleteQueue(ctx, q); err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := c.Stop(sctx); err != nil {
		t.Errorf("stop: %v", err)
	}
}
