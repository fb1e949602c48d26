package fxmodule

import (
	"net/http"

	"github.com/acemq/acemq-go/mq"
)

// ReadyHandler serves a readiness probe (/readyz) from b.Check: 200 and
// "ready" when the broker is connected, not blocking publishing, and every
// consumer is subscribed; otherwise 503 with each problem on a line of its
// own (no credentials: URLs are redacted). It works for any *[mq.Broker],
// with fx or without:
//
//	mux.Handle("/readyz", fxmodule.ReadyHandler(b))
func ReadyHandler(b *mq.Broker) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		if err := b.Check(r.Context()); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(err.Error() + "\n"))
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	})
}
