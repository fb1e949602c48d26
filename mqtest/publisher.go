package mqtest

import (
	"context"
	"sync"

	"github.com/acemq/acemq-go/mq"
)

// Publisher is a fake mq.Sender: it records every message it is given and
// returns Err (nil by default). The zero value is ready to use.
type Publisher struct {
	// Err, when set, is what Publish returns (the message is still
	// recorded, as a real publish that failed may still have landed).
	Err error

	mu   sync.Mutex
	sent []Published
}

// Published is one message given to a Publisher.
type Published struct {
	RoutingKey string
	Message    mq.Message
}

var _ mq.Sender = (*Publisher)(nil)

// Publish records m and returns p.Err, or ctx's error if ctx has ended.
func (p *Publisher) Publish(ctx context.Context, routingKey string, m mq.Message) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sent = append(p.sent, Published{RoutingKey: routingKey, Message: m})
	return p.Err
}

// Messages is every message published so far, in order.
func (p *Publisher) Messages() []Published {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Published(nil), p.sent...)
}
