// Command acemq is AceMQ's operator tool: it counts the messages in
// queues, peeks at the head of a queue without taking anything, and replays
// dead letters and parked messages back to the queue they failed on. It is
// a thin shell around package ops, which services can build into their own
// admin tools.
//
//	acemq count <queue>...
//	acemq peek <queue> [-n N]
//	acemq replay <q.dlq|q.parked> [--to <queue>] [--limit N] [--dry-run]
//
// The broker is --url, else $AMQP_URL, else amqp://guest:guest@127.0.0.1:5672/.
// Credentials are never printed: URLs are shown redacted. Logs go to stderr
// (-v for debug detail), results to stdout. A replay of more than 100
// messages shows a progress bar when stderr is a terminal.
//
// A replay is safe to interrupt (Ctrl-C): it stops between two messages and
// a second run carries on where it stopped; nothing is lost. The one window
// for a duplicate is the process dying between the broker's confirm of a
// republish and its ack of the original (see package ops).
//
// Exit codes:
//
//	0    done
//	1    failed: a queue does not exist, the broker refused, a replay
//	     stopped on an error (what was moved until then stays moved)
//	2    a replay finished but left messages it could not place in the
//	     queue (each one is listed; give --to)
//	3    the broker could not be reached within --timeout
//	80   usage error (unknown command or flag)
//	130  interrupted
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
