//go:build integration

package integration

// Helpers of the consumer and middleware suite (consumer_*_test.go,
// bench_consume_test.go). Their names start with cons so they do not
// collide with the other suites' helpers in this package; what every suite
// needs (queues, counts, a proxy, a log recorder) is in internal/testenv.

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/acemq/acemq-go/internal/testenv"
	"github.com/acemq/acemq-go/mq"
)

// consBroker starts a broker for the test (on urls, or the test broker)
// whose log goes to a LogRecorder, for assertions on the contract's events.
func consBroker(t testing.TB, urls ...string) (*mq.Broker, *testenv.LogRecorder) {
	t.Helper()
	lg := testenv.NewLogRecorder(t)
	return testenv.Broker(t, mq.Config{URLs: urls, Logger: lg.Logger(), Heartbeat: 2 * time.Second}), lg
}

// consMessages makes n small messages with ids prefix-0 … prefix-(n-1).
func consMessages(prefix string, n int) []mq.Message {
	msgs := make([]mq.Message, n)
	for i := range msgs {
		msgs[i] = mq.Message{Body: []byte(fmt.Sprintf(`{"n":%d}`, i)), MessageId: fmt.Sprintf("%s-%d", prefix, i), ContentType: "application/json"}
	}
	return msgs
}

// consCalls records a handler's calls.
type consCalls struct {
	mu       sync.Mutex
	at       []time.Time
	attempts []int
	ids      map[string]int
}

func (c *consCalls) add(d *mq.Delivery) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.at = append(c.at, time.Now())
	c.attempts = append(c.attempts, d.Attempt())
	if c.ids == nil {
		c.ids = map[string]int{}
	}
	c.ids[d.MessageId]++
	return len(c.at)
}

func (c *consCalls) n() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.at)
}

func (c *consCalls) snapshot() ([]time.Time, []int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Time(nil), c.at...), append([]int(nil), c.attempts...)
}
