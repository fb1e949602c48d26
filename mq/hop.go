package mq

import (
	amqp "github.com/rabbitmq/amqp091-go"
)

// HopMessage is the copy a hop publishes: Message, less a per-message
// expiration (the copy would vanish from .dlq, or come home from a rung
// early), the CC and BCC headers (the broker would send an extra copy to
// those queues on every hop) and a user_id other than the consumer's own
// login (the broker would refuse every hop); plus the original exchange and
// routing key in headers, if the delivery carries none yet.
func (d *Delivery) HopMessage() Message {
	m := d.Message()
	if m.Headers == nil {
		m.Headers = make(amqp.Table, 8)
	}
	m.Expiration = ""
	delete(m.Headers, "CC")
	delete(m.Headers, "BCC")
	if m.UserId != "" && (d.c == nil || m.UserId != d.c.b.login()) {
		m.UserId = ""
	}
	if _, ok := m.Headers[HeaderOriginalExchange]; !ok {
		m.Headers[HeaderOriginalExchange] = d.Exchange
	}
	if _, ok := m.Headers[HeaderOriginalRoutingKey]; !ok {
		m.Headers[HeaderOriginalRoutingKey] = d.RoutingKey
	}
	return m
}

// login is the user name the broker's connections log in with (the first
// URL's; AceMQ expects one login per Broker), parsed once.
func (b *Broker) login() string {
	b.loginOnce.Do(func() {
		if len(b.cfg.URLs) > 0 {
			if u, err := amqp.ParseURI(b.cfg.URLs[0]); err == nil {
				b.loginName = u.Username
			}
		}
	})
	return b.loginName
}
