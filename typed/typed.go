package typed

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/acemq/acemq-go/middleware"
	"github.com/acemq/acemq-go/mq"
)

// Codec turns values into message bodies and back.
type Codec interface {
	// ContentType is the content type a body it encodes is published with
	// ("application/json").
	ContentType() string
	// Marshal encodes v.
	Marshal(v any) ([]byte, error)
	// Unmarshal decodes body into v, a pointer.
	Unmarshal(body []byte, v any) error
}

// JSON is the default codec: encoding/json, content type
// application/json. Unknown fields are ignored when decoding, so a
// producer may add fields before its consumers know them.
var JSON Codec = jsonCodec{}

type jsonCodec struct{}

func (jsonCodec) ContentType() string                { return "application/json" }
func (jsonCodec) Marshal(v any) ([]byte, error)      { return json.Marshal(v) }
func (jsonCodec) Unmarshal(body []byte, v any) error { return json.Unmarshal(body, v) }

// Option adjusts Handler, Publish and Encode.
type Option interface{ apply(*config) }

type config struct{ codec Codec }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithCodec sets the codec. Default JSON.
func WithCodec(c Codec) Option {
	return optionFunc(func(cfg *config) {
		if c != nil {
			cfg.codec = c
		}
	})
}

func configure(opts []Option) config {
	c := config{codec: JSON}
	for _, o := range opts {
		if o != nil {
			o.apply(&c)
		}
	}
	return c
}

// Handler adapts fn to an mq.Handler: each delivery's body is decoded into
// a new T and given to fn with the delivery (for its headers and ids).
// fn's error decides the outcome as any handler's does. A body that does
// not decode is not given to fn: Handler returns the decode error marked
// with middleware.Reject, which Parking sends to <queue>.dlq with reason
// "rejected" and the decode error as its text, never retried.
func Handler[T any](fn func(ctx context.Context, d *mq.Delivery, v T) error, opts ...Option) mq.Handler {
	c := configure(opts)
	return mq.HandlerFunc(func(ctx context.Context, d *mq.Delivery) error {
		var v T
		if err := c.codec.Unmarshal(d.Body, &v); err != nil {
			return middleware.Reject(fmt.Errorf("decode %s body: %w", c.codec.ContentType(), err))
		}
		return fn(ctx, d, v)
	})
}

// Encode returns a Message whose body is v encoded and whose ContentType
// is the codec's, for a caller who sets other properties (CorrelationId,
// Headers, …) before publishing it.
func Encode[T any](v T, opts ...Option) (mq.Message, error) {
	c := configure(opts)
	body, err := c.codec.Marshal(v)
	if err != nil {
		return mq.Message{}, fmt.Errorf("typed: encode %T as %s: %w", v, c.codec.ContentType(), err)
	}
	return mq.Message{Body: body, ContentType: c.codec.ContentType()}, nil
}

// Publish encodes v (see Encode) and publishes it through s with
// routingKey: s is an *mq.Publisher, a publisher fxmodule.AsPublisher
// provides, or a test's mqtest.Publisher. A value that does not encode is
// an error and nothing is published.
func Publish[T any](ctx context.Context, s mq.Sender, routingKey string, v T, opts ...Option) error {
	m, err := Encode(v, opts...)
	if err != nil {
		return err
	}
	return s.Publish(ctx, routingKey, m)
}
