package mqlink_test

import (
	"errors"
	"fmt"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/internal/mqlink"
	"github.com/acemq/acemq-go/mq"
)

// Input the wire cannot carry is refused at the call, naming the field and
// the limit; the connection is untouched.
func ExampleCheckName() {
	err := mqlink.CheckName("routing key", strings.Repeat("k", 300))
	fmt.Println(errors.Is(err, mq.ErrInvalid))
	fmt.Println(err)
	// Output:
	// true
	// mq: invalid routing key: is 300 bytes, at most 255
}

// Headers go through the same rules as everything else the library sends:
// nesting within what amqp091-go's reader accepts, keys within 255 bytes,
// types AMQP can carry.
func ExampleCheckTable() {
	var deep any = "leaf"
	for range mqlink.MaxHeaderDepth + 1 {
		deep = amqp.Table{"n": deep}
	}
	fmt.Println(mqlink.CheckTable("header", amqp.Table{"deep": deep}))
	fmt.Println(mqlink.CheckTable("header", amqp.Table{"count": uint64(1)}))
	fmt.Println(mqlink.CheckTable("header", amqp.Table{"big": 5_000_000_000})) // written as 64 bits: fine
	// Output:
	// mq: invalid header "deep" "n" "n" …: nests tables and arrays 33 deep, at most 32
	// mq: invalid header "count": is a uint64, which AMQP cannot carry (use bool, the sized integers, int, float32/64, string, []byte, time.Time, amqp.Decimal, amqp.Table or []any)
	// <nil>
}

// AttemptOf reads x-acemq-attempt as any AceMQ library may have written it.
func ExampleAttemptOf() {
	fmt.Println(mqlink.AttemptOf(nil))
	fmt.Println(mqlink.AttemptOf(amqp.Table{mq.HeaderAttempt: int32(3)}))
	fmt.Println(mqlink.AttemptOf(amqp.Table{mq.HeaderAttempt: "4"}))
	fmt.Println(mqlink.AttemptOf(amqp.Table{mq.HeaderAttempt: []byte("5")}))
	fmt.Println(mqlink.AttemptOf(amqp.Table{mq.HeaderAttempt: 2.0}))
	// Output:
	// 1
	// 3
	// 4
	// 5
	// 2
}
