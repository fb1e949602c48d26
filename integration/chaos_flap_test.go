//go:build chaos

package integration

import (
	"fmt"
	"testing"
	"time"

	"github.com/acemq/acemq-go/internal/testenv"
	"github.com/acemq/acemq-go/middleware"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/retry"
)

// Scenario (issue 11): the endpoint flaps — for 4 s every connection
// completes its AMQP handshake and is dropped at once — while 4 goroutines
// publish 2000 messages over 8 s and a Standard consumer consumes. The
// supervisor backs off across flaps (a connection that dies within
// 5 s counts as a failed attempt) and says so once; every
// confirmed message is handled at least once.
func TestChaosFlappingEndpoint(t *testing.T) {
	testenv.NoLeaks(t)
	const (
		total      = 2000
		publishers = 4
		spread     = 8 * time.Second
		flapFrom   = 2 * time.Second
		flapFor    = 4 * time.Second
	)
	ctx := testenv.Context(t, 2*time.Minute)
	direct := chaosBroker(t, nil, testenv.Name(t, "direct"), "")
	p := retry.Exponential(3, 50*time.Millisecond)
	q := testenv.Queue(t, direct, p)

	proxy, u := testenv.Proxy(t)
	lg := newChaosLog(t)
	b := chaosBroker(t, lg, testenv.Name(t, "flapping"), u)
	led := newChaosLedger("flapping-endpoint")
	c := chaosConsume(t, ctx, b, q, led.handler(chaosBusy), middleware.Standard(p), mq.WithConcurrency(4))
	pub := b.Publisher("")
	defer pub.Close()

	start, wg := led.paced(ctx, pub, q, "flap", total, publishers, spread)
	time.Sleep(time.Until(start.Add(flapFrom)))
	before := proxy.Opened()
	proxy.FlapAfterHandshake(true)
	proxy.Cut()
	time.Sleep(flapFor)
	proxy.FlapAfterHandshake(false)
	dials := proxy.Opened() - before
	wg.Wait()

	led.settle(t, direct, q)
	testenv.Stop(t, c)
	left := testenv.Count(t, direct, q)
	if left != 0 {
		t.Errorf("%d messages left in %s after the consumer stopped", left, q)
	}
	if n := led.failureCount(); n > 0 {
		t.Errorf("%d publishes failed: a publish in flight while the endpoint flaps is sent again until its context ends", n)
	}
	// With this suite's backoff (20 ms to 500 ms), 4 s of flapping allow
	// about 4 + 4/0.375 ≈ 15 dials; the landed code redialled at once,
	// hundreds of times a second.
	if dials >= 25 {
		t.Errorf("%d connections opened in %v of flapping; want fewer than 25", dials, flapFor)
	}
	if n := lg.Count(mq.EventConnectionFlapping); n != 1 {
		t.Errorf("%d %s records; want 1", n, mq.EventConnectionFlapping)
	}
	led.report(t, lg, nil, fmt.Sprintf("flap_for=%v dials_while_flapping=%d flapping_events=%d left=%d",
		flapFor, dials, lg.Count(mq.EventConnectionFlapping), left))
}
