package otelmq

import (
	"errors"
	"fmt"
	"io"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/mq"
)

// replyCode finds the code in every shape an AMQP reply code comes in, and
// allocates nothing doing it (every failed attempt's error is named with
// it).
func TestReplyCodeShapesWithoutAllocating(t *testing.T) {
	for _, c := range []struct {
		err  error
		want int
	}{
		{nil, 0},
		{io.EOF, 0},
		{errors.New("plain"), 0},
		{mq.ErrUnroutable, 0},
		{&mq.BrokerError{Op: "declare queue", Code: 406}, 406},
		{fmt.Errorf("consume: %w", &mq.BrokerError{Code: 404}), 404},
		// A BrokerError without a code defers to the error it wraps.
		{&mq.BrokerError{Op: "consume", Err: &amqp.Error{Code: 404, Server: true}}, 404},
		{&mq.BrokerError{Op: "publish", Err: io.EOF}, 0},
		{&amqp.Error{Code: 320}, 320},
		{fmt.Errorf("a: %w", fmt.Errorf("b: %w", &amqp.Error{Code: 541})), 541},
		{errors.Join(io.EOF, &amqp.Error{Code: 504}), 504},
		{mq.Requeue(&mq.BrokerError{Code: 312}), 312},
		{mq.Requeue(nil), 0},
	} {
		if got := replyCode(c.err); got != c.want {
			t.Errorf("replyCode(%v) = %d, want %d", c.err, got, c.want)
		}
		if testing.Short() {
			continue
		}
		if n := testing.AllocsPerRun(50, func() { _ = replyCode(c.err) }); n != 0 {
			t.Errorf("replyCode(%v): %.0f allocations, want 0", c.err, n)
		}
	}
}
