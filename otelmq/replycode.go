package otelmq

import (
	"errors"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/mq"
)

// replyCode is the AMQP reply code err carries (an *mq.BrokerError or an
// *amqp.Error anywhere in its chain), or 0. It allocates nothing: every
// failed attempt's error is named with it.
func replyCode(err error) int {
	if be, ok := errors.AsType[*mq.BrokerError](err); ok && be.Code != 0 {
		return be.Code
	}
	if ae, ok := errors.AsType[*amqp.Error](err); ok {
		return ae.Code
	}
	return 0
}
