// Package typed carries Go values as message bodies: [Handler] decodes a
// delivery's body into a T before the application's function sees it, and
// [Publish] encodes a T and sets the content type. JSON is the default
// [Codec]; a protobuf (or any other) user brings theirs with [WithCodec].
//
//	h := typed.Handler(func(ctx context.Context, d *mq.Delivery, o Order) error { ... })
//	err := typed.Publish(ctx, events, "order.placed", Order{ID: "o-1"})
//
// # A body that does not decode
//
// It is a permanent failure: Handler returns it marked with
// [middleware.Reject], so under [middleware.Standard] (Parking) the message
// goes straight to <queue>.dlq, reason "rejected", the decode error as
// x-acemq-error, without a retry. Without Parking in the chain it is
// rejected without requeue (the broker's own dead-letter route).
//
// # Why a package of its own
//
// mq stays free of codecs and of the Reject mark (which belongs to
// middleware), and middleware stays a list of middleware. typed sits beside
// otelmq, above both. It owns Handler, Publish, [Encode], Codec (with JSON)
// and [Option]. It must not touch settlement, the headers the library
// writes, or the message's other properties (a caller who needs them uses
// Encode and publishes the Message itself).
package typed
