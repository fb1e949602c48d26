// Package link carries what package mq lends the packages built on it
// (mqtest, fxmodule, middleware, ops, otelmq, outbox) and their tests,
// without exporting it to users: mq fills the variables in its init, so
// any package that imports mq finds them set. The wire limits are
// constants here, and mq uses them. The variables typed any hold
// functions of mq's own types; package mqlink gives them their types.
package link

import amqp "github.com/rabbitmq/amqp091-go"

// The limits of mq's validator: what an AMQP 0-9-1 frame can carry and
// what amqp091-go v1.16.0's frame reader accepts (read.go: maxFieldDepth,
// maxContainerElements). A value past one of them would fail the frame and
// close the whole connection, so the validator refuses it at the call.
const (
	// MaxShortString is the longest AMQP short string, in bytes: exchange
	// and queue names, routing keys, consumer tags, every string property
	// of a message and every header key.
	MaxShortString = 255
	// MaxHeaderDepth is how deeply tables and arrays may nest inside a
	// message's headers (or a declaration's arguments): a table directly in
	// the headers is at depth 1.
	MaxHeaderDepth = 32
	// MaxTableEntries is the most entries one table, and the most elements
	// one array, may hold anywhere in the headers.
	MaxTableEntries = 8192
	// MaxErrorHeader caps the x-acemq-error header, in bytes.
	MaxErrorHeader = 4096
)

// Set by mq's init.
var (
	// CheckName checks a short string about to be sent (a queue or
	// exchange name, a routing key): at most MaxShortString bytes. field
	// names it in the error, which matches mq.ErrInvalid.
	CheckName func(field, s string) error
	// CheckTable checks a table about to be sent (headers, arguments)
	// against the limits above and the types AMQP carries; the error
	// matches mq.ErrInvalid.
	CheckTable func(field string, t amqp.Table) error
	// ErrorText is err's text as mq writes it down (x-acemq-error, span
	// statuses): at most MaxErrorHeader bytes, cut on a rune boundary.
	ErrorText func(err error) string
	// Redact hides the credentials of a broker URL or a keyword/value
	// connection string, as every log record and error of mq does.
	Redact func(u string) string
	// AttemptOf reads the x-acemq-attempt header as a consumer does: 1
	// when it is missing or not a positive number.
	AttemptOf func(h amqp.Table) int

	// Of mq's types (see package mqlink).
	NewRunner, NewDelivery, AsHop, MessageOf, CheckPublish, IsMandatory, PolicyOf any
)
