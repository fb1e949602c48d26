package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/mq"
)

// publishCmd is `acemq publish`: one message, its body from stdin or a
// file, confirmed by the broker before the command says so.
type publishCmd struct {
	Key             string        `arg:"" name:"routing-key" help:"Routing key; with the default exchange, the name of the queue to publish to."`
	Exchange        string        `short:"e" help:"Exchange to publish to (default: the default exchange, which routes by queue name)."`
	File            string        `short:"f" placeholder:"PATH" help:"Read the body from this file (default: stdin; - is stdin)."`
	ContentType     string        `help:"The content_type property."`
	ContentEncoding string        `help:"The content_encoding property."`
	MessageID       string        `name:"message-id" help:"The message_id property (default: a new unique id, printed)."`
	CorrelationID   string        `name:"correlation-id" help:"The correlation_id property."`
	ReplyTo         string        `help:"The reply_to property."`
	Type            string        `help:"The type property."`
	AppID           string        `name:"app-id" help:"The app_id property."`
	Priority        int           `help:"The priority property (0-255)."`
	Expiration      time.Duration `help:"The expiration property: the message's time to live (whole milliseconds; default none)."`
	Transient       bool          `help:"Delivery mode 1, transient (default: persistent)."`
	Header          []string      `short:"H" sep:"none" placeholder:"NAME=VALUE" help:"A header with a string value; repeat for more."`
	AllowUnroutable bool          `help:"Exit 0 when no queue is bound for the message, which the broker then returns and drops (the outcome still says unroutable; default: that fails)."`
}

// publishJSON is what publish --json prints.
type publishJSON struct {
	Exchange   string `json:"exchange"`
	RoutingKey string `json:"routing_key"`
	MessageID  string `json:"message_id"`
	Bytes      int    `json:"bytes"`
	// Outcome is the broker's answer: confirmed (a queue holds it),
	// unroutable (returned: no queue bound; nothing kept, also with
	// --allow-unroutable, which only makes that exit 0), nacked (refused
	// after it was taken in), refused (refused at once: the exchange does
	// not exist or is internal, the user may not write to it, the message
	// breaks a limit; nothing taken), or unknown (no answer: the message
	// may or may not have been taken).
	Outcome string `json:"outcome"`
}

// Validate checks the flags before the broker is dialled.
func (c *publishCmd) Validate() error {
	if c.Priority < 0 || c.Priority > 255 {
		return fmt.Errorf("--priority is %d, must be 0 to 255", c.Priority)
	}
	if c.Expiration < 0 || (c.Expiration > 0 && c.Expiration%time.Millisecond != 0) {
		return fmt.Errorf("--expiration %v: must be a positive whole number of milliseconds", c.Expiration)
	}
	for _, h := range c.Header {
		if name, _, ok := strings.Cut(h, "="); !ok || name == "" {
			return fmt.Errorf("--header %q: want NAME=VALUE", h)
		}
	}
	return nil
}

func (c *publishCmd) message(body []byte) mq.Message {
	m := mq.Message{Body: body, ContentType: c.ContentType, ContentEncoding: c.ContentEncoding, MessageId: c.MessageID,
		CorrelationId: c.CorrelationID, ReplyTo: c.ReplyTo, Type: c.Type, AppId: c.AppID, Priority: uint8(c.Priority)}
	if m.MessageId == "" {
		m.MessageId = mq.NewMessageID()
	}
	if c.Transient {
		m.DeliveryMode = amqp.Transient
	}
	if c.Expiration > 0 {
		m.Expiration = fmt.Sprint(c.Expiration.Milliseconds())
	}
	for _, h := range c.Header {
		name, value, _ := strings.Cut(h, "=")
		if m.Headers == nil {
			m.Headers = amqp.Table{}
		}
		m.Headers[name] = value
	}
	return m
}

func (c *publishCmd) body(e *env) ([]byte, error) {
	var r io.Reader = e.in
	if c.File != "" && c.File != "-" {
		f, err := os.Open(c.File)
		if err != nil {
			return nil, &codedError{exitUsage, fmt.Errorf("--file: %w", err)}
		}
		defer f.Close()
		r = f
	}
	return io.ReadAll(r)
}

func (c *publishCmd) Run(e *env) error {
	body, err := c.body(e)
	if err != nil {
		return err
	}
	m := c.message(body)
	res := publishJSON{Exchange: c.Exchange, RoutingKey: c.Key, MessageID: m.MessageId, Bytes: len(body), Outcome: "unknown"}
	e.result = res
	// Always mandatory, --allow-unroutable too: a message the broker
	// returns is reported unroutable, never confirmed.
	pub := e.b.Publisher(c.Exchange)
	defer pub.Close()
	ctx, cancel := context.WithTimeout(e.ctx, e.timeout)
	defer cancel()
	err = pub.Publish(ctx, c.Key, m)
	dest := "the default exchange"
	if c.Exchange != "" {
		dest = fmt.Sprintf("exchange %q", c.Exchange)
	}
	accepted := false // unroutable, which --allow-unroutable accepts
	switch {
	case err == nil:
		res.Outcome = "confirmed"
	case errors.Is(err, mq.ErrUnroutable) && c.AllowUnroutable:
		res.Outcome = "unroutable"
		err, accepted = nil, true
	case errors.Is(err, mq.ErrUnroutable):
		res.Outcome = "unroutable"
		err = fmt.Errorf("unroutable: no queue is bound for key %q on %s, so the broker kept nothing (give --allow-unroutable to publish anyway)", c.Key, dest)
	case errors.Is(err, mq.ErrNacked):
		res.Outcome = "nacked"
		err = fmt.Errorf("the broker refused the message (nack): %w", err)
	case errors.Is(err, mq.ErrNotFound) && c.Exchange != "":
		res.Outcome = "refused"
		err = fmt.Errorf("exchange %q does not exist", c.Exchange)
	case errors.Is(err, mq.ErrAccessRefused), errors.Is(err, mq.ErrNotFound), errors.Is(err, mq.ErrPreconditionFailed):
		// The broker closed the channel on the publish (403: an internal
		// exchange, no write permission; 406: a limit): it took nothing.
		res.Outcome = "refused"
		err = fmt.Errorf("the broker refused the publish, nothing was taken: %w", err)
	case errors.Is(err, mq.ErrInvalid):
		return &codedError{exitUsage, err}
	case e.ctx.Err() == nil && ctx.Err() != nil:
		err = fmt.Errorf("no confirm within %v: the message may or may not have been taken (%w)", e.timeout, err)
	}
	e.result = res
	if err != nil {
		return err
	}
	if accepted {
		fmt.Fprintf(e.out, "published message %s (%d bytes) to %s with key %s: unroutable, no queue is bound for it and the broker dropped it (accepted by --allow-unroutable)\n",
			printable(m.MessageId), len(body), dest, printable(c.Key))
		return nil
	}
	fmt.Fprintf(e.out, "published message %s (%d bytes) to %s with key %s: confirmed\n", printable(m.MessageId), len(body), dest, printable(c.Key))
	return nil
}
