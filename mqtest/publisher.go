package mqtest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/topology"
)

// Publisher is a fake mq.Sender that answers as a Publisher on a broker
// would: every publish runs the runtime's own validator first (input the
// wire cannot carry fails with mq.ErrInvalid, the same error, and is not
// recorded); given a Topology, a publish is routed through it as RabbitMQ
// routes it, and one that no binding matches fails with mq.ErrUnroutable
// unless the publisher allows it (Options). Every publish it takes is
// recorded with the queues it reached. The zero value is ready to use: it
// validates, and without a topology takes every valid publish.
type Publisher struct {
	// Err, when set, is what a publish the fake takes returns (the message
	// is still recorded, as a real publish that failed may still have
	// landed). Default nil.
	Err error
	// Topology is what the broker holds: the exchanges, queues and
	// bindings a publish is routed through (direct, topic with * and #,
	// fanout and headers exchanges, an exchange's alternate-exchange, the
	// predeclared amq.* exchanges; the default exchange routes to a queue
	// the topology declares, by name). A publish to an exchange it does
	// not declare fails as the broker refuses it, with a *mq.BrokerError
	// (404 NOT_FOUND; 403 ACCESS_REFUSED for an internal exchange).
	// Default nil: no routing, every valid publish is taken.
	Topology *topology.Topology
	// Exchange is the exchange published to, as given to Broker.Publisher
	// ("", the default, is the default exchange: the routing key names a
	// queue). Used with Topology.
	Exchange string
	// Options are the options the real publisher is given: the fake is
	// mandatory unless they say otherwise (mq.AllowUnroutable), as
	// Broker.Publisher builds one. A publish no queue is bound for then
	// fails with mq.ErrUnroutable and is not recorded; allowed, it is
	// recorded with no queues. Default none: mandatory.
	Options []mq.PublisherOption

	mu   sync.Mutex
	sent []Published
}

// Published is one message a Publisher took.
type Published struct {
	RoutingKey string
	Message    mq.Message
	// Queues are the queues the message reached, in the order the
	// topology declares its bindings (nil without a Topology; empty for an
	// unroutable publish the publisher allowed, which the broker drops).
	Queues []string
}

var _ mq.Sender = (*Publisher)(nil)

// Publish answers as a publisher to p.Exchange on a broker holding
// p.Topology would: ctx's error if ctx has ended; mq.ErrInvalid for input
// the runtime refuses; a *mq.BrokerError for an exchange the topology does
// not have; mq.ErrUnroutable for a mandatory publish no binding matches;
// otherwise it records the message and returns p.Err.
func (p *Publisher) Publish(ctx context.Context, routingKey string, m mq.Message) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := mq.CheckPublish(p.Exchange, routingKey, m); err != nil {
		return err
	}
	var queues []string
	if p.Topology != nil {
		r := router{t: p.Topology}
		var err error
		if queues, err = r.route(p.Exchange, routingKey, m, nil); err != nil {
			return err
		}
		if len(queues) == 0 && mq.IsMandatory(p.Options...) {
			return fmt.Errorf("mq: publish to %s: %w", dest(p.Exchange, routingKey), mq.ErrUnroutable)
		}
		if queues == nil {
			queues = []string{}
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sent = append(p.sent, Published{RoutingKey: routingKey, Message: m, Queues: queues})
	return p.Err
}

// Messages is every message published so far, in order.
func (p *Publisher) Messages() []Published {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Published(nil), p.sent...)
}

// dest names a publish's destination as the runtime's errors do.
func dest(exchange, key string) string {
	if exchange == "" {
		return fmt.Sprintf("queue %q", key)
	}
	return fmt.Sprintf("exchange %q with key %q", exchange, key)
}

// router routes a publish through a topology as RabbitMQ does.
type router struct{ t *topology.Topology }

// predeclared are the exchanges every vhost has besides the default one.
var predeclared = map[string]topology.Kind{
	"amq.direct": topology.Direct, "amq.topic": topology.Topic,
	"amq.fanout": topology.Fanout, "amq.headers": topology.Headers, "amq.match": topology.Headers,
}

// route returns the queues exchange puts a message with key in (each
// once), following alternate exchanges (seen guards against a cycle).
func (r router) route(exchange, key string, m mq.Message, seen []string) ([]string, error) {
	if exchange == "" {
		if _, ok := r.t.QueueNamed(key); ok {
			return []string{key}, nil
		}
		return nil, nil
	}
	ex, ok := r.exchange(exchange)
	if !ok {
		if len(seen) > 0 {
			return nil, nil // a missing alternate exchange drops, as the broker does
		}
		return nil, &mq.BrokerError{Op: "publish to " + dest(exchange, key), Code: 404,
			Reason: fmt.Sprintf("NOT_FOUND - no exchange '%s' in vhost '/'", exchange)}
	}
	if ex.Internal && len(seen) == 0 {
		return nil, &mq.BrokerError{Op: "publish to " + dest(exchange, key), Code: 403,
			Reason: fmt.Sprintf("ACCESS_REFUSED - cannot publish to internal exchange '%s' in vhost '/'", exchange)}
	}
	var queues []string
	for _, b := range r.t.Bindings() {
		if b.Exchange == exchange && matches(ex.Kind, b, key, m) && !slices.Contains(queues, b.Queue) {
			queues = append(queues, b.Queue)
		}
	}
	if len(queues) > 0 {
		return queues, nil
	}
	if ae, ok := ex.Args["alternate-exchange"].(string); ok && !slices.Contains(seen, ae) && ae != exchange {
		return r.route(ae, key, m, append(seen, exchange))
	}
	return nil, nil
}

func (r router) exchange(name string) (topology.Exchange, bool) {
	for _, e := range r.t.Exchanges() {
		if e.Name == name {
			return e, true
		}
	}
	if k, ok := predeclared[name]; ok {
		return topology.Exchange{Name: name, Kind: k, Durable: true}, true
	}
	return topology.Exchange{}, false
}

// matches reports whether binding b of an exchange of kind k takes a
// message with key.
func matches(k topology.Kind, b topology.Binding, key string, m mq.Message) bool {
	switch k {
	case topology.Direct:
		return b.Key == key
	case topology.Fanout:
		return true
	case topology.Headers:
		return headersMatch(b.Args, m.Headers)
	default:
		return topicMatch(words(b.Key), words(key))
	}
}

// words splits a routing key or binding key into its dot-separated words;
// the empty key has none.
func words(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ".")
}

// topicMatch matches a topic binding's words against a key's: * is one
// word, # zero or more.
func topicMatch(pattern, key []string) bool {
	if len(pattern) == 0 {
		return len(key) == 0
	}
	switch pattern[0] {
	case "#":
		for i := 0; i <= len(key); i++ {
			if topicMatch(pattern[1:], key[i:]) {
				return true
			}
		}
		return false
	case "*":
		return len(key) > 0 && topicMatch(pattern[1:], key[1:])
	default:
		return len(key) > 0 && key[0] == pattern[0] && topicMatch(pattern[1:], key[1:])
	}
}

// headersMatch is a headers exchange's test: x-match all (the default) or
// any over the binding's arguments, those starting with x- left out
// (all-with-x and any-with-x count them); an argument without a value
// asks only that the header be there.
func headersMatch(args, headers map[string]any) bool {
	mode, _ := args["x-match"].(string)
	withX := strings.HasSuffix(mode, "-with-x")
	anyOf := strings.HasPrefix(mode, "any")
	for k, want := range args {
		if k == "x-match" || strings.HasPrefix(k, "x-") && !withX {
			continue
		}
		got, ok := headers[k]
		hit := ok && (want == nil || sameValue(want, got))
		if anyOf && hit {
			return true
		}
		if !anyOf && !hit {
			return false
		}
	}
	return !anyOf
}

// sameValue compares a binding argument with a header value as RabbitMQ
// does: of one type class (every integer size is one class, both float
// sizes another) and equal.
func sameValue(a, b any) bool {
	ca, va := class(a)
	cb, vb := class(b)
	if ca != cb {
		return false
	}
	if ca == "other" {
		return fmt.Sprintf("%#v", a) == fmt.Sprintf("%#v", b)
	}
	return va == vb
}

func class(v any) (string, any) {
	switch x := v.(type) {
	case int:
		return "int", int64(x)
	case int8:
		return "int", int64(x)
	case int16:
		return "int", int64(x)
	case int32:
		return "int", int64(x)
	case int64:
		return "int", x
	case uint8:
		return "int", int64(x)
	case uint16:
		return "int", int64(x)
	case uint32:
		return "int", int64(x)
	case float32:
		return "float", float64(x)
	case float64:
		return "float", x
	case string:
		return "string", x
	case []byte:
		return "bytes", string(x)
	case bool:
		return "bool", x
	}
	return "other", nil
}
