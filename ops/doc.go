// Package ops is the operator's side of AceMQ as a library: count the
// messages in queues, peek at the head of a queue without taking anything,
// replay dead letters and parked messages back to the queue they failed
// on, purge a queue or delete chosen messages, and the dead-letter web
// console built on those calls. The acemq command (cmd/acemq) is a thin
// shell around it; a service can build the same calls into its own admin
// endpoints.
//
// # What it owns
//
// [Count], [Rungs] (a queue's rungs of both kinds, classic and durable,
// with what waits in each, and [RungsRetirable]: when the classic set can
// be deleted by hand), [Peek] ([PeekMatching] with a [Filter]), [Replay] (with
// [ReplayOptions].Filter), [Purge], [Delete] (messages a Filter matches), the
// reading of the contract's headers (x-acemq-attempt, -reason, -error,
// -failed-at, -source-queue, the replay headers) from a message as an
// operator sees it, and the [Console]: its HTTP handler and server (Listen,
// Serve), its access rules (token, loopback, CSRF), its reads of the
// management API (queue names and types, GET only) and the replays it
// runs on goroutines of its own, which Close stops and waits for.
//
// # What it must not touch
//
// The consumer runtime and the built-in middleware, and, through the
// console, the broker's settings or any source queue beyond publishing
// replays to it (it reads, deletes from and purges
// <q>.dlq and <q>.parked only). It works on raw channels handed out by
// [mq.Broker.Channel] (one per call, never shared) and publishes through an
// [mq.Publisher], so every move is confirmed like the library's own hops.
//
// Every call returns by its context, also when the network goes quiet
// under it (amqp091's calls, Channel.Close among them, would wait for the
// heartbeat to give the connection up): it waits a quarter of a second
// more for an answer already asked for (so that on a broker that answers,
// what a cancelled call held is back in its queue when it returns), then
// leaves what it was waiting for to end with the connection, and what it
// held goes back with it. The
// one wait past the context is a replay's move of a message it already
// took, bounded by ReplayOptions.PublishTimeout.
//
// # Filters, purge and delete
//
// A Filter selects messages by x-acemq-reason, text in x-acemq-error, the
// message id and age (x-acemq-failed-at, else the timestamp). PeekMatching
// and a filtered Replay look at every message the queue held when they
// began; those not matched stay where they were. Purge empties a queue;
// Delete acknowledges, and so removes, the messages a Filter matches (the
// acemq command's: those with one id), returning every other message to
// where it was. Both are destructive: the acemq command asks before either.
//
// Peek, PeekMatching, Delete, Replay and the console take messages without
// acknowledging them and give back what they keep with one basic.nack
// (multiple, with requeue) before closing their channel. On a quorum queue
// up to RabbitMQ 4.2 that counts as a delivery: each message's
// x-delivery-count rises, and past the queue's delivery limit (20 by
// default on RabbitMQ 4) the broker dead-letters or drops it. RabbitMQ 4.3
// counts such a return only in x-acquired-count, not toward the limit; it
// would count a return by the channel's close, which is why they nack
// first.
//
// # Replay
//
// Replay moves messages from <q>.dlq or <q>.parked back to their source
// queue, one at a time: basic.get without auto-ack, republish with body and
// properties unchanged through the default exchange (mandatory, confirmed,
// marked as a mq.OutcomeReplay hop), and only after the broker confirmed the
// republish, ack the original. The failure record is closed: the attempt
// count is reset (x-acemq-attempt is removed, so the next delivery is
// attempt 1), x-acemq-source-queue, -reason, -error and -failed-at are
// removed, and so is x-acemq-hop-traceparent (a traced replay writes its
// own). The message's other headers, its traceparent and tracestate and its
// original exchange and routing key are kept, and the replay is recorded in
// x-acemq-replayed-at (AMQP timestamp) and x-acemq-replayed-from, replacing
// an earlier replay's. See docs/contract.md, "Replay".
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
// then gives them back, so the broker returns them to the queue where they
// were. They come back marked redelivered, and while Peek holds them a
// consumer of the queue does not get them.
//
// # Console
//
// Console is the dead-letter web console, an http.Handler built on these
// calls: live counts of every watched queue's .dlq and .parked, a queue's
// failures grouped by reason, error text (ids and numbers folded) and
// source queue, one message in full, and replays of one message, a group or
// all (Replay with ReplayOptions.Filter, run by the console, stoppable),
// Delete and Purge. It reads only <q>.dlq and <q>.parked (classic queues),
// never a source queue, so a quorum source keeps its order and delivery
// counts; a look streams the messages with basic.consume and gives them
// back in place like Peek (what it was sent and did not read too). A .dlq or .parked that
// is a quorum queue after all (a vhost whose default queue type is quorum
// makes one), where a look counts toward the delivery limit, is not read,
// not even once: the management API's type says so, else the look itself
// asks first (its prefetch is the channel's, which a quorum queue or a
// stream refuses at basic.consume, before it delivers anything, up to
// RabbitMQ 4.2; 4.3 takes it, and does not count a look's return), and a
// message that carries a quorum queue's mark stops it as a last guard;
// the page says why.
//
// Without a token the console answers loopback clients only, and only
// requests addressed to a loopback address or localhost (Host, and Origin
// when sent), so a DNS-rebinding page cannot reach it; it refuses what
// another site's page has the browser fetch (Sec-Fetch-Site cross-site),
// following a link excepted; and Listen refuses other addresses. Every
// POST needs the page's CSRF token and passes net/http's
// CrossOriginProtection; URLs on its pages are redacted as mq.Redact does.
package ops
