package mq

import (
	"context"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"
)

// PublishHook sees every publish, the library's own hops included.
type PublishHook interface {
	// OnPublish runs before the message is sent. It may add headers to
	// p.Message (trace context, say). The context it returns is the one
	// OnPublishDone gets.
	OnPublish(ctx context.Context, p *PublishInfo) context.Context
	// OnPublishDone runs once the publish has its outcome: confirmed (err nil),
	// nacked, returned, or given up.
	OnPublishDone(ctx context.Context, p *PublishInfo, err error)
}

// PublishInfo is one publish as a [PublishHook] sees it.
type PublishInfo struct {
	Exchange   string
	RoutingKey string
	Mandatory  bool
	// Hop says why the library republished the message itself ("" for
	// an application's own publish); OutcomeRequeue is a copy kept in its
	// own queue while a refused hop is pending (x-acemq-pending-hop).
	Hop Outcome
	// Message is the message about to be sent; hooks may edit its Headers.
	Message *Message
	// Server is the host:port of the connection the publish went out on,
	// when known.
	Server string
}

// DeliveryHook sees every delivery a consumer receives.
type DeliveryHook interface {
	// OnDelivery runs before the middleware chain; the context it returns
	// is the chain's.
	OnDelivery(ctx context.Context, d *Delivery) context.Context
	// OnDeliveryDone runs after the delivery is settled; d.Outcome() says
	// how, err is what the chain returned.
	OnDeliveryDone(ctx context.Context, d *Delivery, err error)
}

// AttemptHook sees every call of the application's handler: one per
// attempt, in-process retries included (d.Attempt() numbers them).
type AttemptHook interface {
	OnAttempt(ctx context.Context, d *Delivery) context.Context
	OnAttemptDone(ctx context.Context, d *Delivery, err error)
}

// EventHook sees the library's notable events (the Event* constants).
type EventHook interface {
	OnEvent(ctx context.Context, e Event)
}

type hookSet struct {
	publish  []PublishHook
	delivery []DeliveryHook
	attempt  []AttemptHook
	event    []EventHook
	bad      error // the first value in Config.Hooks that is no hook (Start fails with it)
}

func (s *hookSet) add(hooks ...any) {
	for i, h := range hooks {
		if h == nil {
			continue
		}
		used := false
		if x, ok := h.(PublishHook); ok {
			s.publish, used = append(s.publish, x), true
		}
		if x, ok := h.(DeliveryHook); ok {
			s.delivery, used = append(s.delivery, x), true
		}
		if x, ok := h.(AttemptHook); ok {
			s.attempt, used = append(s.attempt, x), true
		}
		if x, ok := h.(EventHook); ok {
			s.event, used = append(s.event, x), true
		}
		if !used && s.bad == nil {
			s.bad = fmt.Errorf("mq: Config.Hooks[%d] (%T) implements none of PublishHook, DeliveryHook, AttemptHook, EventHook", i, h)
		}
	}
}

func (s *hookSet) check() error { return s.bad }

func (s *hookSet) emit(ctx context.Context, e Event) {
	for _, h := range s.event {
		h.OnEvent(ctx, e)
	}
}

// cloneHeaders copies a header table one level deep (nested tables and
// arrays are shared; the library never edits them).
func cloneHeaders(t amqp.Table) amqp.Table {
	if t == nil {
		return nil
	}
	c := make(amqp.Table, len(t)+4)
	for k, v := range t {
		c[k] = v
	}
	return c
}
