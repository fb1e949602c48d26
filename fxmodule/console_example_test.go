package fxmodule_test

import (
	"context"
	"net"
	"net/http"
	"time"

	"go.uber.org/fx"

	"github.com/acemq/acemq-go/fxmodule"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/ops"
	"github.com/acemq/acemq-go/topology"
)

// The dead-letter console of the service's own queues (those its topology
// gives a .dlq or .parked), mounted on an admin server the app's lifecycle
// starts and stops.
func ExampleWithConsole() {
	fx.New(
		fx.Supply(mq.Config{URLs: []string{"amqp://guest:guest@127.0.0.1:5672/"}}),
		fxmodule.Module,
		fxmodule.AsTopology(topology.New().Queue("shipping.orders", topology.DeadLetter(), topology.Retry(policy))),
		fxmodule.WithConsole(ops.ConsoleOptions{BasePath: "/dlq"}), // loopback clients only: no Token
		fx.Invoke(func(lc fx.Lifecycle, con *ops.Console) {
			admin := http.NewServeMux()
			admin.Handle("/dlq/", http.StripPrefix("/dlq", con))
			srv := &http.Server{Addr: "127.0.0.1:9090", Handler: admin, ReadHeaderTimeout: 5 * time.Second}
			lc.Append(fx.Hook{
				OnStart: func(context.Context) error {
					ln, err := net.Listen("tcp", srv.Addr)
					if err != nil {
						return err
					}
					go srv.Serve(ln)
					return nil
				},
				OnStop: srv.Shutdown,
			})
		}),
	).Run()
}
