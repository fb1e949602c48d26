package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"go.uber.org/fx"

	"github.com/acemq/acemq-go/fxmodule"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/outbox"
)

func main() {
	fx.New(app()).Run()
}

// app is the whole service.
func app() fx.Option {
	url := os.Getenv("AMQP_URL")
	if url == "" {
		url = "amqp://guest:guest@127.0.0.1:5672/"
	}
	return fx.Options(
		// The app's logger, and the broker's through Config.Logger (the
		// one place AceMQ takes it).
		fx.Supply(slog.New(slog.NewTextHandler(os.Stderr, nil))),
		fx.Provide(func(log *slog.Logger) mq.Config {
			return mq.Config{URLs: []string{url}, ConnectionName: "shipping", Logger: log}
		}),
		fx.Provide(database),
		fxmodule.Module,
		fxmodule.AsTopology(Topology),
		// Events go through the outbox: written in the transaction of
		// the order (POST /orders) or of the inbox (order.shipped), and
		// published by the relay once it commits. The module's one
		// schema names the relay's, the outbox's and the inbox's tables,
		// and its start fails if they are missing (database creates them
		// first).
		outbox.Module(relayOptions()...),
		outbox.AsSender[OrderEvents](Exchange),
		fx.Provide(func(events OrderEvents, log *slog.Logger) *Shipping {
			return &Shipping{Events: events, Carrier: parcelCarrier{}, Log: log}
		}),
		fxmodule.AsConsumer((*Shipping).Consumer),
		fx.Invoke(serveHTTP),
	)
}

// parcelCarrier stands in for a carrier's API: it books everything but
// orders of more than 10 items.
type parcelCarrier struct{}

func (parcelCarrier) Book(_ context.Context, o Order) (string, error) {
	if o.Items > 10 {
		return "", errors.New("carrier: parcel too heavy")
	}
	return "TRK-" + o.ID, nil
}

// serveHTTP serves POST /orders (stores the order and its order.placed
// event in one transaction) and /readyz for the app's lifetime.
func serveHTTP(lc fx.Lifecycle, b *mq.Broker, db *sql.DB, events OrderEvents, log *slog.Logger) {
	addr := os.Getenv("LISTEN")
	if addr == "" {
		addr = "127.0.0.1:8080"
	}
	mux := http.NewServeMux()
	mux.Handle("GET /readyz", fxmodule.ReadyHandler(b))
	mux.HandleFunc("POST /orders", func(w http.ResponseWriter, r *http.Request) {
		var o Order
		if err := json.NewDecoder(r.Body).Decode(&o); err != nil || o.ID == "" {
			http.Error(w, "want a JSON order with an id", http.StatusBadRequest)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		defer cancel()
		placed, err := placeOrder(ctx, db, events, o)
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusAccepted)
		if !placed {
			fmt.Fprintf(w, "order %s was placed before\n", o.ID)
			return
		}
		fmt.Fprintf(w, "order %s placed\n", o.ID)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	lc.Append(fx.Hook{
		OnStart: func(ctx context.Context) error {
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				return err
			}
			go func() {
				defer close(done)
				if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
					log.Error("http.failed", "error", err)
				}
			}()
			log.Info("http.listening", "addr", ln.Addr().String())
			return nil
		},
		// Appended after the module's hooks, so it stops first: no new
		// orders while the consumers drain.
		OnStop: func(ctx context.Context) error {
			err := srv.Shutdown(ctx)
			<-done
			return err
		},
	})
}
