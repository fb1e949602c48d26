package fxmodule

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"

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
// within its time is reported as failed without waiting for it: its
// goroutine, the only one it gets, ends when its Check returns (which a
// Check does once its context ends), its answer dropped into done's room.
func runChecks(ctx context.Context, checks []Check) []checkResult {
	ctx, cancel := context.WithTimeout(ctx, CheckTimeout)
	defer cancel()
	type answer struct {
		i   int
		res checkResult
	}
	done := make(chan answer, len(checks)) // room for every answer: no sender blocks
	for i, c := range checks {
		go func() {
			d, err := c.Check(ctx)
			done <- answer{i, checkResult{name: c.Name, detail: d, err: err}}
		}()
	}
	out := make([]checkResult, len(checks))
	answered := make([]bool, len(checks))
	take := func(a answer) { out[a.i], answered[a.i] = a.res, true }
wait:
	for range checks {
		select {
		case a := <-done:
			take(a)
		case <-ctx.Done():
			break wait
		}
	}
	for len(done) > 0 { // those that answered as time ran out
		take(<-done)
	}
	for i, c := range checks {
		if !answered[i] {
			out[i] = checkResult{name: c.Name, err: fmt.Errorf("no answer in time: %w", ctx.Err())}
		}
	}
	slices.SortStableFunc(out, func(a, b checkResult) int { return strings.Compare(a.name, b.name) })
	return out
}
