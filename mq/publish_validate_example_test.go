package mq_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/mq"
)

// Input the wire cannot carry is refused at the call, naming the field and
// the limit; the connection is untouched. Headers go through the same rules
// as everything else the library sends: nesting within what amqp091-go's
// reader accepts, keys within 255 bytes, types AMQP can carry.
func ExampleCheckPublish() {
	err := mq.CheckPublish("", "orders.new", mq.Message{MessageId: strings.Repeat("i", 300)})
	fmt.Println(errors.Is(err, mq.ErrInvalid))
	fmt.Println(err)
	var deep any = "leaf"
	for range 33 {
		deep = amqp.Table{"n": deep}
	}
	fmt.Println(mq.CheckPublish("orders", "order.placed", mq.Message{Headers: amqp.Table{"deep": deep}}))
	fmt.Println(mq.CheckPublish("orders", "order.placed", mq.Message{Headers: amqp.Table{"count": uint64(1)}}))
	fmt.Println(mq.CheckPublish("orders", "order.placed", mq.Message{Headers: amqp.Table{"big": 5_000_000_000}})) // written as 64 bits: fine
	// Output:
	// true
	// mq: publish to queue "orders.new": mq: invalid message id: is 300 bytes, at most 255
	// mq: publish to exchange "orders" with key "order.placed": mq: invalid header "deep" "n" "n" …: nests tables and arrays 33 deep, at most 32
	// mq: publish to exchange "orders" with key "order.placed": mq: invalid header "count": is a uint64, which AMQP cannot carry (use bool, the sized integers, int, float32/64, string, []byte, time.Time, amqp.Decimal, amqp.Table or []any)
	// <nil>
}

// Every publisher is mandatory: a message no queue is bound for fails with
// ErrUnroutable. Events that may have no audience say so.
func ExampleAllowUnroutable() {
	ctx := context.Background()
	b := mq.New(mq.Config{URLs: []string{"amqp://guest:guest@127.0.0.1:5672/"}})
	if err := b.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer b.Close(ctx)

	orders := b.Publisher("orders") // nil only once some queue has it
	if err := orders.Publish(ctx, "order.placed", mq.Message{Body: []byte(`{"id":1}`)}); errors.Is(err, mq.ErrUnroutable) {
		log.Print("nobody is bound for order.placed")
	}
	audit := b.Publisher("audit", mq.AllowUnroutable()) // fire-and-forget as far as routing goes
	_ = audit.Publish(ctx, "user.login", mq.Message{Body: []byte(`{"user":"ann"}`)})
}
