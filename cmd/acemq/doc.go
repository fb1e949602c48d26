// Command acemq is AceMQ's operator tool: it counts the messages in
// queues, peeks at messages without taking them, replays dead letters and
// parked messages back to the queue they failed on, purges a queue or
// deletes one message, publishes one message, and serves the dead-letter
// web console. It is a thin shell around package ops, which services can
// build into their own admin tools.
//
// Install it for scripts, which read its exit codes:
//
//	go install github.com/acemq/acemq-go/cmd/acemq@latest
//
// (go run ./cmd/acemq works for a look, but reports every exit code other
// than 0 as 1.)
//
//	acemq count <queue>...
//	acemq peek <queue> [-n N] [filters]
//	acemq replay <q.dlq|q.parked> [--to <queue>] [-n N] [--dry-run] [filters]
//	acemq purge <queue> [--yes]
//	acemq delete <queue> <message-id> [--yes]
//	acemq publish <routing-key> [--exchange E] [--file F] [properties] [-H NAME=VALUE]... [--allow-unroutable]
//	acemq console [<queue>...] [--listen ADDR] [--management URL [--vhost V]] [--token T] [--read-only]
//	acemq rungs <queue> --waits W[,W...]
//
// rungs lists the queue's rungs of both kinds for the waits of its retry
// policy, classic (<queue>.retry.<wait>) and durable
// (<queue>.retry.<wait>.quorum), with the messages waiting in each; when
// durable rungs exist and every classic one is empty it says "classic
// rungs empty: safe to retire" (the library never deletes a rung).
//
// console serves ops.Console on --listen (default 127.0.0.1:8089) until
// interrupted; an address that is not loopback needs --token (or
// $ACEMQ_CONSOLE_TOKEN). It shows the .dlq and .parked of the queues named
// and, with --management (or $ACEMQ_MANAGEMENT_URL), of every queue in
// --vhost that has one; it needs one or the other. Every operator action
// (replay, delete, purge) is logged to stderr, with the queue and the
// client's address, -v or not, as a console mounted in a service logs them
// to the service's logger.
//
// Filters (peek and replay): --reason, --error (text contained in
// x-acemq-error), --message-id, --older-than (a duration).
//
// The broker is --url, else $AMQP_URL, else amqp://guest:guest@127.0.0.1:5672/.
// A refused connection or an unknown host fails at once; --wait keeps
// trying for --timeout. A refused login (wrong user or password, or a
// vhost the user may not open) is never retried and has its own exit
// code, 6, as soon as the broker says so (RabbitMQ answers a wrong
// password after 3 s). Credentials are never printed: URLs are shown
// redacted. Results go to stdout, one JSON object with --json (with
// "error" and "exit" when the command failed); an error is one line on
// stderr, "acemq: ...". Connection logs appear only with -v. A replay of
// more than 100 messages shows a progress bar when stderr is a terminal.
//
// peek shows each message as the console does: the attempts it used
// (x-acemq-attempt is the attempt its next delivery would be, so one less;
// "unknown", null in --json, when the header is absent, as on a message
// the broker dead-lettered itself) and the route it was first published
// with (the x-acemq-original-* headers its first hop wrote, else the
// broker's oldest x-death record, else the delivery's own; "route from"
// says which), and the last replay's record, if any (x-acemq-replayed-at
// and -from: "replayed" in the text, replayed_at and replayed_from in
// --json; every other header follows, and --json writes it whole, a
// table such as x-death as an object, an array as an array). Peeking
// takes messages without acknowledging them and
// gives them back with basic.nack: on a quorum queue up to RabbitMQ 4.2
// that raises their delivery count (RabbitMQ 4 drops or dead-letters a
// message past its delivery limit, 20 by default; 4.3 does not count such
// a return) and may move them back in the queue; peek warns when it
// sees a quorum queue's mark, x-delivery-count or, on RabbitMQ 4.3 and
// later, x-acquired-count.
//
// purge and delete ask before they change anything; --yes skips the
// question, and an answer other than y (or no answer: stdin closed) changes
// nothing.
//
// A queue that does not exist is said the same way by every command:
// queue "x" does not exist (exit 1).
//
// publish sends one message, its body read from stdin or --file, to the
// default exchange (the routing key is then the queue's name) or to
// --exchange, with the properties given as flags (--content-type,
// --message-id, --correlation-id, --reply-to, --type, --app-id,
// --priority, --expiration, --transient) and string headers as -H
// NAME=VALUE, and waits for the broker's confirm within --timeout. It
// prints the message id (a new one unless --message-id is given) and the
// outcome: confirmed (a queue holds it; exit 0), or unroutable (no queue
// bound for it: the broker returned it and kept nothing; exit 0 with
// --allow-unroutable, which accepts that, and the outcome still says
// unroutable), nacked, refused (refused at once, nothing taken: no such
// exchange, an internal one, no write permission, a broken limit), or
// unknown (no answer within --timeout, or the connection lost before one:
// it may or may not have been taken), each exit 1. With --json it prints
// exchange, routing_key, message_id, bytes and outcome.
//
// A replay is safe to interrupt (Ctrl-C): it stops between two messages and
// a second run carries on where it stopped; nothing is lost. The message it
// took is moved first, within 30 s (a broker that blocks publishing can
// make it wait that long); a second Ctrl-C exits at once, with 130. The one
// window for a duplicate is the process dying between the broker's confirm
// of a republish and its ack of the original (see package ops).
//
// Exit codes:
//
//	0    done
//	1    failed: a queue or message does not exist, the broker refused, a
//	     replay stopped on an error (what was moved until then stays moved),
//	     a publish was not confirmed
//	2    usage error (unknown command or flag, bad value)
//	3    the broker could not be reached (refused, unknown host; with
//	     --wait, not within --timeout)
//	4    a replay finished but left messages it could not place (give --to)
//	5    a purge or delete was not confirmed (nothing was changed)
//	6    the broker refused the login (user, password, or the vhost)
//	130  interrupted
package main
