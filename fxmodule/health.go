package fxmodule

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/acemq/acemq-go/mq"
)

// ReadyHandler serves a readiness probe (/readyz) from b.Check and the
// readiness checks: 200 and "ready" when the broker is connected, not
// blocking publishing, every consumer is subscribed and every check
// passes; otherwise 503 with each problem on a line of its own (no
// credentials: URLs are redacted). The checks are those given here and,
// when b is the broker of an fx app built with Module, those the app was
// given with AsCheck (the outbox's, for one): each runs at every probe,
// all at once, each bounded at CheckTimeout, and each gets a line of its
// own after the first, "<name>: <detail>" (or "ok") when it passes and
// "mq: not ready: <name>: <reason>" when it does not. It works for any
// *[mq.Broker], with fx or without:
//
//	mux.Handle("/readyz", fxmodule.ReadyHandler(b))
func ReadyHandler(b *mq.Broker, checks ...Check) http.Handler {
	checks = slices.Clone(checks)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		all := append(slices.Clone(checks), attached.get(b)...)
		var problems, details []string
		if err := b.Check(r.Context()); err != nil {
			problems = append(problems, err.Error())
		}
		for _, res := range runChecks(r.Context(), all) {
			if res.err != nil {
				problems = append(problems, fmt.Sprintf("%v: %s: %v", mq.ErrNotReady, res.name, res.err))
			}
			switch {
			case res.detail != "":
				details = append(details, res.name+": "+res.detail)
			case res.err == nil:
				details = append(details, res.name+": ok")
			}
		}
		if len(problems) > 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(strings.Join(append(problems, details...), "\n") + "\n"))
			return
		}
		_, _ = w.Write([]byte(strings.Join(append([]string{"ready"}, details...), "\n") + "\n"))
	})
}

type checkResult struct {
	name, detail string
	err          error
}

// runChecks runs every check at once, each within CheckTimeout, and
// returns their results sorted by name. A check that does not return
// within its time is reported as failed without waiting for it.
func runChecks(ctx context.Context, checks []Check) []checkResult {
	out := make([]checkResult, len(checks))
	var wg sync.WaitGroup
	for i, c := range checks {
		out[i].name = c.Name
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, CheckTimeout)
			defer cancel()
			done := make(chan checkResult, 1)
			go func() {
				d, err := c.Check(cctx)
				done <- checkResult{name: c.Name, detail: d, err: err}
			}()
			select {
			case res := <-done:
				out[i] = res
			case <-cctx.Done():
				select {
				case res := <-done: // it answered as time ran out
					out[i] = res
				default:
					out[i].err = fmt.Errorf("no answer in time: %w", cctx.Err())
				}
			}
		})
	}
	wg.Wait()
	slices.SortStableFunc(out, func(a, b checkResult) int { return strings.Compare(a.name, b.name) })
	return out
}
