// Command plain is AceMQ for Go without fx: connect, declare a topology,
// consume with the standard middleware stack, publish, and shut down in
// order. Run it against a local broker:
//
//	go run ./examples/plain
//
// It declares plain.orders (with its .dlq, .parked and retry rungs), sends
// five orders — one of which fails twice before it succeeds and one of which
// is malformed and parked — and deletes what it declared before it exits.
// AMQP_URL picks the broker; PLAIN_PREFIX prefixes the queue's name.
package main
