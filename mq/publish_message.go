package mq

import (
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Message is what a [Publisher] sends: a body and the AMQP properties, named
// as amqp091-go names them on a delivery.
//
// Defaults for a new message: persistent (DeliveryMode 0 means
// amqp.Persistent; set amqp.Transient to opt out), a unique MessageId and the
// current Timestamp when those are empty. A message copied from a delivery
// ([Delivery.Message], [MessageOf]) keeps its properties exactly as they were.
type Message struct {
	Body            []byte
	ContentType     string
	ContentEncoding string
	// DeliveryMode: 0 (default) is persistent, amqp.Transient is transient.
	DeliveryMode  uint8
	Priority      uint8
	CorrelationId string
	ReplyTo       string
	Expiration    string
	MessageId     string
	Timestamp     time.Time
	Type          string
	UserId        string
	AppId         string
	Headers       amqp.Table

	verbatim bool
}

// MessageOf copies a delivery into a [Message] for republishing: body and
// every property unchanged (no defaults applied), headers copied so they
// can be added to without touching the delivery, less the counters a
// quorum queue wrote on the delivery (x-delivery-count, x-acquired-count):
// they count this delivery's returns, and a copy that carried them would
// have them kept by the broker and counted again. Every copy the library
// publishes (a hop, a carried wait, a replay) is made here.
func MessageOf(d amqp.Delivery) Message {
	return Message{
		Body:            d.Body,
		ContentType:     d.ContentType,
		ContentEncoding: d.ContentEncoding,
		DeliveryMode:    d.DeliveryMode,
		Priority:        d.Priority,
		CorrelationId:   d.CorrelationId,
		ReplyTo:         d.ReplyTo,
		Expiration:      d.Expiration,
		MessageId:       d.MessageId,
		Timestamp:       d.Timestamp,
		Type:            d.Type,
		UserId:          d.UserId,
		AppId:           d.AppId,
		Headers:         copyHeaders(d.Headers),
		verbatim:        true,
	}
}

// publishing converts m to what amqp091-go sends, applying the defaults of
// a new message.
func (m *Message) publishing() amqp.Publishing {
	p := amqp.Publishing{
		Headers:         m.Headers,
		ContentType:     m.ContentType,
		ContentEncoding: m.ContentEncoding,
		DeliveryMode:    m.DeliveryMode,
		Priority:        m.Priority,
		CorrelationId:   m.CorrelationId,
		ReplyTo:         m.ReplyTo,
		Expiration:      m.Expiration,
		MessageId:       m.MessageId,
		Timestamp:       m.Timestamp,
		Type:            m.Type,
		UserId:          m.UserId,
		AppId:           m.AppId,
		Body:            m.Body,
	}
	if m.verbatim {
		return p
	}
	if p.DeliveryMode == 0 {
		p.DeliveryMode = amqp.Persistent
	}
	if p.MessageId == "" {
		p.MessageId = NewMessageID()
		m.MessageId = p.MessageId
	}
	if p.Timestamp.IsZero() {
		p.Timestamp = time.Now()
		m.Timestamp = p.Timestamp
	}
	return p
}

var (
	idPrefix  = newIDPrefix()
	idCounter atomic.Uint64
)

func newIDPrefix() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:]) + "-"
}

// NewMessageID returns a message id unique to this process run (a random
// per-process prefix and a counter): cheap enough for every publish.
func NewMessageID() string {
	var buf [48]byte // one allocation: the string
	b := append(buf[:0], idPrefix...)
	return string(strconv.AppendUint(b, idCounter.Add(1), 36))
}

// copyHeaders is a copy of a delivery's headers for republishing, less the
// broker's counters (see MessageOf).
func copyHeaders(h amqp.Table) amqp.Table {
	c := cloneHeaders(h)
	delete(c, headerDeliveryCount)
	delete(c, headerAcquiredCount)
	return c
}
