package otelmq

import (
	"errors"
	"fmt"
	"io"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/mq"
)

// replyCode must find what mq.ReplyCode finds, in every shape an AMQP
// reply code comes in.
func TestReplyCodeIsMQs(t *testing.T) {
	for _, err := range []error{
		nil,
		io.EOF,
		&mq.BrokerError{Op: "declare queue", Code: 406},
		fmt.Errorf("consume: %w", &mq.BrokerError{Code: 404}),
		&mq.BrokerError{Op: "consume", Err: &amqp.Error{Code: 404, Server: true}},
		&mq.BrokerError{Op: "publish", Err: io.EOF},
		&amqp.Error{Code: 320},
		fmt.Errorf("a: %w", fmt.Errorf("b: %w", &amqp.Error{Code: 541})),
		errors.Join(io.EOF, &amqp.Error{Code: 504}),
		mq.Requeue(&mq.BrokerError{Code: 312}),
		mq.Requeue(nil),
	} {
		if got, want := replyCode(err), mq.ReplyCode(err); got != want {
			t.Errorf("replyCode(%v) = %d, mq.ReplyCode = %d", err, got, want)
		}
	}
}
