package mq

import (
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/internal/link"
	"github.com/acemq/acemq-go/retry"
)

// What mq lends the packages built on it, but not its users (package
// internal/link; package internal/mqlink types the ones of mq's types).
func init() {
	link.CheckName = checkName
	link.CheckTable = checkTable
	link.ErrorText = errorText
	link.Redact = redact
	link.AttemptOf = attemptOf
	link.NewRunner = func(h Handler, hooks []AttemptHook, opts ...ConsumerOption) (any, error) {
		r, err := buildRunner(h, hooks, opts...)
		if err != nil {
			return nil, err
		}
		return r, nil
	}
	link.NewDelivery = func(queue string, raw amqp.Delivery, rt any) *Delivery {
		f, _ := rt.(fateRuntime)
		return newDelivery(queue, raw, f)
	}
	link.AsHop = asHop
	link.MessageOf = messageOf
	link.CheckPublish = checkMessage
	link.IsMandatory = isMandatory
	link.PolicyOf = func(s *Subscription) retry.Policy { return s.retryPolicy() }
}
