package mq

import (
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"time"
)

// [Consumer] defaults.
const (
	defaultPrefetch     = 32
	defaultConcurrency  = 1
	defaultRequeuePause = time.Second
	// defaultMaxWaiting is the room for deliveries waiting in-process on
	// top of the prefetch window ([WithMaxWaiting]).
	defaultMaxWaiting = 256
)

// ConsumerOption configures a consumer.
type ConsumerOption interface{ applyConsumer(*consumerConfig) }

type consumerOption func(*consumerConfig)

func (f consumerOption) applyConsumer(c *consumerConfig) { f(c) }

type consumerConfig struct {
	prefetch     int
	concurrency  int
	tag          string
	mws          []Middleware
	requeuePause time.Duration
	giveUp       time.Duration
	maxWaiting   int
	inOrder      bool
	errs         []error
}

// WithPrefetch sets how many unacknowledged deliveries the broker sends
// ahead (basic.qos). Default 32, raised to the
// concurrency if that is higher; it must be at least the concurrency.
func WithPrefetch(n int) ConsumerOption {
	return consumerOption(func(c *consumerConfig) {
		if n < 1 {
			c.errs = append(c.errs, fmt.Errorf("WithPrefetch(%d): must be at least 1", n))
			return
		}
		c.prefetch = n
	})
}

// WithConcurrency sets how many deliveries are handled at once. Default 1,
// which keeps the queue's order.
func WithConcurrency(n int) ConsumerOption {
	return consumerOption(func(c *consumerConfig) {
		if n < 1 {
			c.errs = append(c.errs, fmt.Errorf("WithConcurrency(%d): must be at least 1", n))
			return
		}
		c.concurrency = n
	})
}

// WithMiddleware adds middleware around the handler, the first outermost.
// Given more than once, later middleware sits inside earlier middleware.
// The order is exactly the order written: nothing reorders it.
func WithMiddleware(mws ...Middleware) ConsumerOption {
	return consumerOption(func(c *consumerConfig) { c.mws = append(c.mws, mws...) })
}

// WithRequeuePause sets how long a message the chain returns with [Requeue]
// (a hop that failed, a panic that escaped every middleware) is held before
// it is returned to its queue, so a missing queue does not turn into a hot
// loop. Default 1 s. Cut short when the consumer
// stops or its channel is lost.
func WithRequeuePause(d time.Duration) ConsumerOption {
	return consumerOption(func(c *consumerConfig) { c.requeuePause = max(d, 0) })
}

// WithMaxWaiting sets how many deliveries may wait in-process at once for
// their next attempt (a [Decision] to retry in-process) without slowing the rest of the
// queue. Default 256. A waiting delivery frees its
// worker, and up to n of them take no room from the prefetch window: the
// queue flows around them at full speed. Past n, each further waiting
// delivery takes its room from the window, so the broker sends less until
// a wait ends, and when every delivery in the window waits, the consumer
// idles until the first wait is over. 0 gives waits no room of their own.
// To keep waiting deliveries out of the window the consumer uses a few
// more channels of the same connection (at most 1 + n/16); DESIGN.md
// ("Waiting in-process") says how.
func WithMaxWaiting(n int) ConsumerOption {
	return consumerOption(func(c *consumerConfig) {
		if n < 0 {
			c.errs = append(c.errs, fmt.Errorf("WithMaxWaiting(%d): must be at least 0", n))
			return
		}
		c.maxWaiting = n
	})
}

// InOrder keeps the queue's order through retries: an in-process wait holds
// its worker, so no later message overtakes a failing one (with the default
// concurrency of 1, the queue waits with it). Without InOrder, a delivery
// waiting in-process frees its worker for the rest of the queue. Broker
// rungs reorder a queue whatever the option: keep every wait in-process
// for strict order. So does RabbitMQ 4.x when the consumer's node dies
// with deliveries unsettled: a quorum queue holds those until the node is
// back or its consumer-disconnected timeout passes, and sends the rest to
// the consumer resubscribed elsewhere (docs/reliability.md, InOrder).
//
// A wait cut short by Stop (a deploy) keeps the message in its place:
// the original goes back to the queue with basic.nack, unacknowledged,
// where without InOrder a copy carrying the next attempt would go to the
// tail. The cost is the attempt, as after a kill -9: the next consumer
// runs the attempt that failed again. RabbitMQ 4.3 does not count that
// nack toward a quorum queue's delivery limit (a Stop walks no message
// towards it); 4.0 to 4.2 count it, as they count every return, and past
// two such returns each counts as an attempt used.
func InOrder() ConsumerOption {
	return consumerOption(func(c *consumerConfig) { c.inOrder = true })
}

// WithGiveUpAfter ends the consumer with an error (see Done and Err) once
// it has failed to resubscribe for d without a break — a queue deleted for
// good, say. Default: never; the consumer retries with backoff and says why
// in the log.
func WithGiveUpAfter(d time.Duration) ConsumerOption {
	return consumerOption(func(c *consumerConfig) { c.giveUp = max(d, 0) })
}

// qos is what each of the consumer's channels asks of basic.qos: the
// window for the deliveries being handled plus room for the few that may
// wait in-process on it before the session moves (consume_lanes.go), which
// the broker counts as unacknowledged too.
func (cfg *consumerConfig) qos() int {
	return min(cfg.prefetch+min(cfg.maxWaiting, laneWaiters), math.MaxUint16)
}

// maxLanes is how many channels a session may hold.
func (cfg *consumerConfig) maxLanes() int {
	if cfg.maxWaiting == 0 {
		return 1
	}
	return 1 + (cfg.maxWaiting+laneWaiters-1)/laneWaiters
}

var consumerSeq atomic.Uint64

// consumerConfigOf applies opts to the defaults of a consumer of queue on
// a broker whose connections are called conn, and notes in errs what is
// wrong with the result.
func consumerConfigOf(conn, queue string, h Handler, opts []ConsumerOption) consumerConfig {
	cfg := consumerConfig{requeuePause: defaultRequeuePause, maxWaiting: -1}
	for _, o := range opts {
		if o != nil {
			o.applyConsumer(&cfg)
		}
	}
	if queue == "" {
		cfg.errs = append(cfg.errs, errors.New("the queue name is empty"))
	}
	cfg.errs = append(cfg.errs, checkName("queue name", queue))
	if h == nil {
		cfg.errs = append(cfg.errs, errors.New("the handler is nil"))
	}
	if cfg.concurrency == 0 {
		cfg.concurrency = defaultConcurrency
	}
	if cfg.prefetch == 0 {
		cfg.prefetch = max(defaultPrefetch, cfg.concurrency)
	}
	if cfg.prefetch < cfg.concurrency {
		cfg.errs = append(cfg.errs, fmt.Errorf("prefetch %d is below the concurrency %d: handlers would sit idle", cfg.prefetch, cfg.concurrency))
	}
	// The consumer tag names the connection, the queue and the consumer,
	// so the management UI tells the consumers of a queue apart; the end
	// is kept when it is too long for a short string.
	cfg.tag = fmt.Sprintf("%s.%s.%d", conn, queue, consumerSeq.Add(1))
	if len(cfg.tag) > 255 {
		cfg.tag = cfg.tag[len(cfg.tag)-255:]
	}
	if cfg.maxWaiting < 0 {
		cfg.maxWaiting = defaultMaxWaiting
	}
	if cfg.inOrder {
		cfg.maxWaiting = 0 // nothing waits without its worker
	}
	return cfg
}
