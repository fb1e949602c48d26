//go:build chaos

package integration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/internal/testenv"
	"github.com/acemq/acemq-go/middleware"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/retry"
)

// chaosInvalid is the i-th kind of input the wire cannot carry (or
// amqp091-go's reader would refuse): the routing key to use and the
// message.
func chaosInvalid(i int, q string) (string, mq.Message) {
	long := strings.Repeat("x", 256)
	switch i % 7 {
	case 0:
		return long, mq.Message{}
	case 1:
		return q, mq.Message{MessageId: long}
	case 2:
		return q, mq.Message{Headers: amqp.Table{long: 1}}
	case 3:
		var v any = "leaf"
		for range 32 + 1 {
			v = amqp.Table{"n": v}
		}
		return q, mq.Message{Headers: amqp.Table{"deep": v}}
	case 4:
		return q, mq.Message{Headers: amqp.Table{"big": strings.Repeat("b", 140_000)}}
	case 5:
		return q, mq.Message{Expiration: "-1"}
	default:
		return q, mq.Message{Headers: amqp.Table{"u": uint64(1)}}
	}
}

// Scenario (issue 11): valid and invalid publishes mixed under load. 6
// goroutines publish 3000 valid messages over 6 s on one Publisher, and
// 1500 invalid ones between them (7 kinds: a 256-byte routing key, message
// id or header key, headers nested 33 deep or over frame_max, a negative
// expiration, an unsupported type), while a Standard consumer consumes on
// the same connection. Every invalid one is refused with ErrInvalid, the
// connection is never lost, and every valid one is handled.
func TestChaosInvalidMixedUnderLoad(t *testing.T) {
	testenv.NoLeaks(t)
	const (
		total      = 3000
		publishers = 6
		spread     = 6 * time.Second
	)
	ctx := testenv.Context(t, 2*time.Minute)
	direct := chaosBroker(t, nil, testenv.Name(t, "direct"), "")
	p := retry.Exponential(3, 50*time.Millisecond)
	q := testenv.Queue(t, direct, p)

	proxy, u := testenv.Proxy(t)
	lg := newChaosLog(t)
	b := chaosBroker(t, lg, testenv.Name(t, "mixed"), u)
	led := newChaosLedger("invalid-mixed-under-load")
	c := chaosConsume(t, ctx, b, q, led.handler(chaosBusy), middleware.Standard(p), mq.WithConcurrency(4))
	pub := b.Publisher("")
	defer pub.Close()

	var invalid, refused atomic.Int64
	var mu sync.Mutex
	wrong := map[string]int{}
	start, wg := led.paced(ctx, pub, q, "mixed", total, publishers, spread)
	var bad sync.WaitGroup
	for w := range publishers {
		bad.Go(func() {
			for i := w; i < total/2; i += publishers {
				if d := time.Until(start.Add(spread * time.Duration(2*i+1) / time.Duration(total))); d > 0 {
					time.Sleep(d)
				}
				key, m := chaosInvalid(i, q)
				pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				var err error
				if i%10 == 9 { // now and then inside a batch, beside a valid message
					id := fmt.Sprintf("mixed-batch-%05d", i)
					if key == q { // with an invalid routing key the whole batch is invalid: not counted as published
						led.sent()
					}
					err = pub.PublishBatch(pctx, key, []mq.Message{m, {MessageId: id, Body: []byte(`{}`)}})
					var be *mq.BatchError
					if errors.As(err, &be) {
						err = be.Errs[0]
						if key == q {
							led.record(id, be.Errs[1])
						}
					}
				} else {
					err = pub.Publish(pctx, key, m)
				}
				cancel()
				invalid.Add(1)
				if errors.Is(err, mq.ErrInvalid) {
					refused.Add(1)
				} else {
					mu.Lock()
					wrong[fmt.Sprint(err)]++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	bad.Wait()

	led.settle(t, direct, q)
	testenv.Stop(t, c)
	left := testenv.Count(t, direct, q)
	if left != 0 {
		t.Errorf("%d messages left in %s", left, q)
	}
	if n := led.failureCount(); n > 0 {
		t.Errorf("%d valid publishes failed", n)
	}
	for e, n := range wrong {
		t.Errorf("%d invalid publishes were not refused with ErrInvalid: %s", n, e)
	}
	losses := lg.Count(mq.EventConnectionLost)
	if losses != 0 || proxy.Accepted() != 1 {
		t.Errorf("%d connections lost, %d accepted by the proxy: invalid input must cost none", losses, proxy.Accepted())
	}
	led.report(t, lg, nil, fmt.Sprintf("invalid=%d refused=%d connections_lost=%d left=%d", invalid.Load(), refused.Load(), losses, left))
}
