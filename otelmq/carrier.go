package otelmq

import (
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/propagation"
)

// HeaderCarrier is a propagation.TextMapCarrier over a message's AMQP
// headers, for propagating trace context through RabbitMQ:
//
//	prop.Inject(ctx, otelmq.HeaderCarrier(msg.Headers))
//	ctx = prop.Extract(ctx, otelmq.HeaderCarrier(d.Headers))
//
// Get reads a value written as a string or as bytes (other languages'
// clients write header values as byte arrays), and finds a key written in
// another case when the exact one is absent. Set writes strings. Set needs
// a non-nil table.
type HeaderCarrier amqp.Table

var _ propagation.TextMapCarrier = HeaderCarrier(nil)

// Get returns the value of key as a string, or "" when it is absent or
// neither a string nor bytes.
func (c HeaderCarrier) Get(key string) string {
	v, ok := c[key]
	if !ok {
		for k, kv := range c {
			if strings.EqualFold(k, key) {
				v, ok = kv, true
				break
			}
		}
		if !ok {
			return ""
		}
	}
	switch x := v.(type) {
	case string:
		return x
	case []byte:
		return string(x)
	}
	return ""
}

// Set writes value under key.
func (c HeaderCarrier) Set(key, value string) { c[key] = value }

// Keys lists the header names.
func (c HeaderCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// valueCarrier carries a single W3C traceparent value: the hop header,
// read and written with propagation.TraceContext whatever the configured
// propagator is.
type valueCarrier struct{ traceparent string }

const traceparentHeader = "traceparent"

func (c *valueCarrier) Get(key string) string {
	if key == traceparentHeader {
		return c.traceparent
	}
	return ""
}

func (c *valueCarrier) Set(key, value string) {
	if key == traceparentHeader {
		c.traceparent = value
	}
}

func (c *valueCarrier) Keys() []string { return []string{traceparentHeader} }
