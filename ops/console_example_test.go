package ops_test

import (
	"context"
	"log"
	"net/http"
	"time"

	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/ops"
)

// A service mounts the dead-letter console on its admin server, under
// /dlq, for the queues it consumes.
func ExampleNewConsole() {
	ctx := context.Background()
	b := mq.New(mq.Config{URLs: []string{"amqp://guest:guest@127.0.0.1:5672/"}})
	if err := b.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer b.Close(ctx)
	con, err := ops.NewConsole(b, ops.ConsoleOptions{Queues: []string{"shipping.orders"}, BasePath: "/dlq"})
	if err != nil {
		log.Fatal(err)
	}
	defer con.Close(ctx)
	admin := http.NewServeMux()
	admin.Handle("/dlq/", http.StripPrefix("/dlq", con))
	srv := &http.Server{Addr: "127.0.0.1:9090", Handler: admin, ReadHeaderTimeout: 10 * time.Second}
	log.Fatal(srv.ListenAndServe())
}

// acemq console does this: Listen refuses a non-loopback address unless
// the console has a token; Serve answers until ctx ends.
func ExampleConsole_Serve() {
	ctx := context.Background()
	b := mq.New(mq.Config{URLs: []string{"amqp://guest:guest@127.0.0.1:5672/"}})
	if err := b.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer b.Close(ctx)
	con, err := ops.NewConsole(b, ops.ConsoleOptions{Queues: []string{"shipping.orders"}, ReadOnly: true})
	if err != nil {
		log.Fatal(err)
	}
	ln, err := con.Listen("127.0.0.1:8089")
	if err != nil {
		log.Fatal(err) // ops.ErrInsecureListen for 0.0.0.0:8089 without a token
	}
	if err := con.Serve(ctx, ln); err != nil {
		log.Fatal(err)
	}
}
