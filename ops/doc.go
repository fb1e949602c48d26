// Package ops is the operator's side of AceMQ as a library: count the
// messages in queues, peek at the head of a queue without taking anything,
// and replay dead letters and parked messages back to the queue they failed
// on. The acemq command (cmd/acemq) is a thin shell around it; a service can
// build the same calls into its own admin endpoints.
//
// What it owns: Count, Peek, Replay and the reading of the contract's
// headers (x-acemq-attempt, -reason, -error, -failed-at, -source-queue, the
// replay headers) from a message as an operator sees it.
//
// What it must not touch: the consumer runtime and the built-in middleware.
// It works on raw channels handed out by mq.Broker.Channel (one per call,
// never shared) and publishes through an mq.Publisher, so every move is
// confirmed like the library's own hops.
//
// # Replay
//
// Replay moves messages from <q>.dlq or <q>.parked back to their source
// queue, one at a time: basic.get without auto-ack, republish with body and
// properties unchanged through the default exchange (mandatory, confirmed,
// marked as a mq.HopReplay hop), and only after the broker confirmed the
// republish, ack the original. The attempt count is reset (x-acemq-attempt
// is removed, so the next delivery is attempt 1) and the replay is recorded
// in x-acemq-replayed-at (AMQP timestamp) and x-acemq-replayed-from.
//
// The source queue is the message's x-acemq-source-queue header, or, when
// that header is missing, empty, of an unusable type or names the queue
// being replayed from, the replayed queue's name with its .dlq or .parked
// suffix stripped. ReplayOptions.To sends every message to one queue
// instead.
//
// Nothing is lost: a publish that fails (the target queue does not exist:
// mq.ErrUnroutable; a nack; a lost connection) returns the original to
// where it was (nack with requeue) and stops the replay with the error. A
// message whose destination cannot be worked out is left where it is and
// reported in ReplayResult.Skipped.
//
// Interrupting is safe: cancelling the context stops the replay between two
// messages (a message already taken is finished first, bounded by
// ReplayOptions.PublishTimeout), and running it again carries on where it
// stopped. The one window that can duplicate a message is a crash (or a
// lost connection) after the broker confirmed the republish and before the
// original's ack reached it: the original then returns to the .dlq and the
// next replay moves it a second time. A lost ack that Replay sees is counted
// in ReplayResult.Duplicates (a lower bound: show it as "at least N") and
// stops the replay.
//
// # Peek
//
// Peek takes up to n messages with basic.get without acknowledging them and
// then closes its channel, so the broker returns them to the queue where
// they were. They come back marked redelivered, and while Peek holds them a
// consumer of the queue does not get them.
package ops
