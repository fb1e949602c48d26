package mq

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	amqp "github.com/rabbitmq/amqp091-go"
)

// conn is one generation of the connection.
type conn struct {
	c      *amqp.Connection
	netc   *socket // the TCP connection under c: closing it aborts everything on c
	closes chan *amqp.Error
	blocks chan amqp.Blocking
	gen    uint64
	url    string // redacted
	server string // host:port
	lost   chan struct{}

	lanes     atomic.Int32 // consumers' extra lanes open on it (takeLane)
	blocked   atomic.Bool  // unblocked != nil, read without the lock on every publish
	blockMu   sync.Mutex
	unblocked chan struct{} // non-nil while the broker blocks publishing
	reason    string
}

// takeLane reserves a channel of c for a consumer's lane beyond its
// first (see consume_lanes.go), and reports whether one was left: lanes take at
// most half of the channels negotiated (channel_max, 2047 by default), so
// that in an outage, when every consumer's deliveries wait and each grows
// to its WithMaxWaiting/16 extra lanes, publishers, hops and new
// subscriptions still get a channel. A session refused one keeps its
// waiting deliveries on the channel it consumes on.
func (c *conn) takeLane() bool {
	if c == nil || c.c == nil {
		return true
	}
	budget := int32(c.c.Config.ChannelMax)
	if budget <= 0 {
		budget = defaultChannelMax
	}
	budget /= 2
	for {
		n := c.lanes.Load()
		if n >= budget {
			return false
		}
		if c.lanes.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// dropLane gives back a channel takeLane reserved.
func (c *conn) dropLane() {
	if c != nil {
		c.lanes.Add(-1)
	}
}

// defaultChannelMax is RabbitMQ's channel_max, which amqp091-go also asks
// for.
const defaultChannelMax = 2047

// frameMax is the frame_max negotiated on c.
func (c *conn) frameMax() int { return c.c.Config.FrameSize }

func (c *conn) setBlocked(active bool, reason string) {
	c.blockMu.Lock()
	defer c.blockMu.Unlock()
	switch {
	case active && c.unblocked == nil:
		c.unblocked, c.reason = make(chan struct{}), reason
		c.blocked.Store(true)
	case !active && c.unblocked != nil:
		close(c.unblocked)
		c.unblocked, c.reason = nil, ""
		c.blocked.Store(false)
	}
	if c.netc != nil {
		c.netc.blocked.Store(c.unblocked != nil)
	}
}

// waitUnblocked waits while the broker blocks publishing on c (a resource
// alarm), bounded by ctx.
func (c *conn) waitUnblocked(ctx context.Context) error {
	if !c.blocked.Load() {
		return nil
	}
	c.blockMu.Lock()
	ch, reason := c.unblocked, c.reason
	c.blockMu.Unlock()
	if ch == nil {
		return nil
	}
	select {
	case <-ch:
		return nil
	case <-c.lost:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("mq: the broker blocks publishing (%s): %w", reason, ctx.Err())
	}
}

// blockedErr adds the broker's reason to err when the broker blocks this
// connection: a call that ran out of time then says why.
func (c *conn) blockedErr(err error) error {
	if c == nil || !c.blocked.Load() {
		return err
	}
	reason, blocked := c.blockState()
	if !blocked {
		return err
	}
	return fmt.Errorf("mq: the broker blocks publishing (%s): %w", reason, err)
}

// blockState reports whether the broker blocks publishing on c, and the
// reason it gave.
func (c *conn) blockState() (reason string, blocked bool) {
	c.blockMu.Lock()
	defer c.blockMu.Unlock()
	return c.reason, c.unblocked != nil
}

func (c *conn) isLost() bool {
	select {
	case <-c.lost:
		return true
	default:
		return c.c.IsClosed()
	}
}
