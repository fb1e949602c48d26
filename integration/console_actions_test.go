//go:build integration

package integration

// The console's actions against the real broker: a replay of one message
// takes no more of the queue than it must; a source queue whose own name
// ends in .dlq can be watched.

import (
	"encoding/json"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq-go/internal/testenv"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/ops"
	"github.com/acemq/acemq-go/topology"
)

var messageLink = regexp.MustCompile(`href="/queues/[^"]+/messages/([0-9a-f]+)"`)

// consoleJobState polls the console's job until it finished and returns
// its state.
func consoleJobState(t *testing.T, base, id string) map[string]any {
	t.Helper()
	var v map[string]any
	testenv.Eventually(t, 20*time.Second, func() bool {
		_, body := consoleGet(t, base+"/api/jobs/"+id, "")
		v = nil
		return json.Unmarshal([]byte(body), &v) == nil && v["finished"] == true
	}, "the replay to finish")
	return v
}

// consolePost posts form to the console (no redirects followed) and
// returns the status and the Location.
func consolePost(t *testing.T, target string, form url.Values) (int, string) {
	t.Helper()
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noFollow.PostForm(target, form)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Location")
}

// Replaying one message takes the messages up to it and no further (it
// used to read, and hold, the whole queue).
func TestConsoleReplayOneTakesNoMore(t *testing.T) {
	testenv.NoLeaks(t)
	b := testenv.Broker(t, mq.Config{})
	q := consoleQueue(t, b)
	dlq := topology.DeadLetterQueue(q)
	const n = 30
	consoleFill(t, b, q, n)
	proxy, purl := testenv.Proxy(t)
	srv := consoleServer(t, testenv.Broker(t, mq.Config{URLs: []string{purl}}), ops.ConsoleOptions{Queues: []string{q}})
	page := "/queues/" + url.PathEscape(q) + "/dlq"
	_, body := consoleGet(t, srv.URL+page, "")
	g := groupLink.FindStringSubmatch(body)
	if g == nil {
		t.Fatalf("no group on the queue's page:\n%s", body)
	}
	_, body = consoleGet(t, srv.URL+g[1], "")
	m := messageLink.FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no message on the group's page:\n%s", body)
	}
	token := consoleCSRF(t, srv.URL, page)
	code, loc := consolePost(t, srv.URL+page+"/replay", url.Values{"csrf": {token}, "scope": {"message"}, "key": {m[1]}})
	j := jobLink.FindStringSubmatch(loc)
	if code != http.StatusSeeOther || j == nil {
		t.Fatalf("replay one: %d, Location %q", code, loc)
	}
	st := consoleJobState(t, srv.URL, j[1])
	if st["moved"] != float64(1) || st["error"] != "" {
		t.Fatalf("replay one: %v", st)
	}
	// The groups are x-seq mod 3: the first message of any group is at
	// position 1, 2 or 3.
	if taken := st["done"].(float64); taken > 3 {
		t.Errorf("replaying one message took %v of the %d messages in the queue, want at most 3 (those up to it)", taken, n)
	}
	testenv.WaitCount(t, b, q, 1, 10*time.Second)
	testenv.WaitCount(t, b, dlq, n-1, 10*time.Second)

	// Deleting one message likewise: count the basic.gets it sends (page
	// views browse with basic.consume).
	_, body = consoleGet(t, srv.URL+g[1], "")
	m = messageLink.FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no message left on the group's page:\n%s", body)
	}
	gets := proxy.Sent(60, 70)
	if code, _ := consolePost(t, srv.URL+page+"/delete", url.Values{"csrf": {token}, "key": {m[1]}}); code != http.StatusSeeOther {
		t.Fatalf("delete one: %d", code)
	}
	if got := proxy.Sent(60, 70) - gets; got > 6 {
		t.Errorf("deleting one message took %d of the %d messages in the queue, want at most 6 (those up to it)", got, n-1)
	}
	testenv.WaitCount(t, b, dlq, n-2, 10*time.Second)
}

// A source queue whose own name ends in .parked: its .dlq is
// <source>.parked.dlq, and the console shows that, not the .dlq of the
// name with both suffixes cut.
func TestConsoleWatchesASourceNamedParked(t *testing.T) {
	testenv.NoLeaks(t)
	b := testenv.Broker(t, mq.Config{})
	src := testenv.Name(t, "parked")
	dlq := topology.DeadLetterQueue(src)
	testenv.Cleanup(t, src, dlq, topology.ParkedQueue(src))
	if err := b.Declare(testenv.Context(t, 10*time.Second), topology.New().Queue(src, topology.DeadLetter())); err != nil {
		t.Fatal(err)
	}
	testenv.Publish(t, b, dlq, opsDeadLetters(src, 2)...)
	testenv.WaitCount(t, b, dlq, 2, 10*time.Second)
	srv := consoleServer(t, b, ops.ConsoleOptions{Queues: []string{dlq}})
	code, body := consoleGet(t, srv.URL+"/", "")
	if code != http.StatusOK || !strings.Contains(body, `<tr data-queue="`+src+`">`) || !strings.Contains(body, `data-count="dlq">2</a>`) {
		t.Fatalf("the overview does not show %s with its 2 dead letters: %d\n%s", src, code, body)
	}
	if code, body := consoleGet(t, srv.URL+"/queues/"+url.PathEscape(src)+"/dlq", ""); code != http.StatusOK || !strings.Contains(body, `<span class="count" id="held">2</span>`) {
		t.Fatalf("the page of %s: %d\n%s", dlq, code, body)
	}
}
