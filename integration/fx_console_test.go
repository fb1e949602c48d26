//go:build integration

package integration

// Issue 24, item 4: the console in fx. One option provides the console,
// watching the queues the app's topology gives a .dlq or .parked; the
// service mounts it; its operator actions are logged; it closes at stop.

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"go.uber.org/fx"

	"github.com/acemq/acemq-go/fxmodule"
	"github.com/acemq/acemq-go/internal/testenv"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/ops"
	"github.com/acemq/acemq-go/topology"
)

func TestFxConsoleWatchesTheTopologysQueues(t *testing.T) {
	testenv.NoLeaks(t)
	base := testenv.Name(t)
	orders, audit, plain := base+".orders", base+".audit", base+".plain"
	testenv.CleanupDerived(t, orders, servicePolicy)
	testenv.Cleanup(t, audit, topology.DeadLetterQueue(audit), topology.ParkedQueue(audit), plain)
	lg := testenv.NewLogRecorder(t)
	admin := http.NewServeMux()
	var b *mq.Broker
	app := fxApp(t,
		fx.Supply(mq.Config{URLs: []string{testenv.URL()}, Logger: lg.Logger()}),
		fxmodule.AsTopology(topology.New().
			Queue(orders, topology.DeadLetter(), topology.Retry(servicePolicy)).
			Queue(audit, topology.DeadLetter()).
			Queue(plain, topology.Classic())),
		fxmodule.WithConsole(ops.ConsoleOptions{BasePath: "/dlq"}),
		fx.Invoke(func(con *ops.Console) { admin.Handle("/dlq/", http.StripPrefix("/dlq", con)) }),
		fx.Populate(&b))
	app.RequireStart()
	fxPublish(t, b, topology.DeadLetterQueue(orders), "failed-1", "failed-2")
	get := func(path string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodGet, "http://localhost"+path, nil)
		req.RemoteAddr = "127.0.0.1:40000"
		rec := httptest.NewRecorder()
		admin.ServeHTTP(rec, req)
		return rec
	}
	rec := get("/dlq/api/counts")
	var counts struct {
		Queues []struct {
			Source string `json:"source"`
			DLQ    int    `json:"dlq"`
		} `json:"queues"`
		Error string `json:"error"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &counts); err != nil || rec.Code != http.StatusOK {
		t.Fatalf("GET /dlq/api/counts: %d %q (%v)", rec.Code, rec.Body.String(), err)
	}
	var sources []string
	dlq := map[string]int{}
	for _, q := range counts.Queues {
		sources = append(sources, q.Source)
		dlq[q.Source] = q.DLQ
	}
	if strings.Join(sources, " ") != audit+" "+orders || dlq[orders] != 2 || counts.Error != "" {
		t.Fatalf("the console watches %v (dlq %v, error %q), want %s and %s with 2 in %s.dlq", sources, dlq, counts.Error, audit, orders, orders)
	}
	// An operator action through the mounted console, logged.
	page := get("/dlq/queues/" + url.PathEscape(orders) + "/dlq")
	m := regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`).FindStringSubmatch(page.Body.String())
	if page.Code != http.StatusOK || m == nil {
		t.Fatalf("the queue page: %d, no CSRF token\n%s", page.Code, page.Body.String())
	}
	form := url.Values{"csrf": {m[1]}, "confirm": {topology.DeadLetterQueue(orders)}}
	req := httptest.NewRequest(http.MethodPost, "http://localhost/dlq/queues/"+url.PathEscape(orders)+"/dlq/purge", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.RemoteAddr = "127.0.0.1:40000"
	purged := httptest.NewRecorder()
	admin.ServeHTTP(purged, req)
	if purged.Code != http.StatusSeeOther {
		t.Fatalf("purge: %d %s", purged.Code, purged.Body.String())
	}
	if recs := lg.All("acemq.console.purged"); len(recs) != 1 {
		t.Fatalf("%d acemq.console.purged records, want 1: %s", len(recs), lg.Events())
	}
	if n := testenv.Count(t, b, topology.DeadLetterQueue(orders)); n != 0 {
		t.Fatalf("%d messages left in %s.dlq after the purge", n, orders)
	}
	app.RequireStop()
	if after := get("/dlq/api/counts"); after.Code != http.StatusServiceUnavailable {
		t.Errorf("after stop the console answered %d, want 503 (closed)", after.Code)
	}
}
