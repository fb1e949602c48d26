//go:build integration

package integration

// The dead-letter console (ops.Console) end to end, in headless Chromium
// (Debian's chromium; `make chromium` installs it) driven through chromedp,
// against the real broker: failures made by a real consumer with the
// standard middleware, seen, opened, replayed, deleted and purged through
// the page; on every version the suite runs on (3.10, 4.0, 4.3: the
// browser is the machine's, the broker the suite's). Helpers here start
// with console. Screenshots of each page go to
// $ACEMQ_CONSOLE_SHOTS, else to the test's temporary directory.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/internal/testenv"
	"github.com/acemq/acemq-go/middleware"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/ops"
	"github.com/acemq/acemq-go/retry"
	"github.com/acemq/acemq-go/topology"
)

// consoleBrowser starts headless Chromium with a fresh profile and the
// flags this closed network needs (no background connections), bounded by
// d; it is stopped when the test ends.
func consoleBrowser(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("chromium is not installed (make chromium): %v", err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.WindowSize(1280, 900),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	bctx, cancelTab := chromedp.NewContext(actx)
	t.Cleanup(func() {
		cancelTab()
		cancelAlloc()
	})
	// The first run starts the browser, which lives as long as bctx: it
	// takes no deadline; the actions after it do.
	startc := make(chan error, 1)
	go func() { startc <- chromedp.Do(bctx) }()
	select {
	case err := <-startc:
		if err != nil {
			t.Fatalf("start chromium: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("chromium did not start within 30 s")
	}
	ctx, cancelTime := context.WithTimeout(bctx, d)
	t.Cleanup(cancelTime)
	return ctx
}

// consoleShots is where the test writes its screenshots.
func consoleShots(t *testing.T) string {
	dir := os.Getenv("ACEMQ_CONSOLE_SHOTS")
	if dir == "" {
		dir = filepath.Join(t.TempDir(), "shots")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshots in %s", dir)
	return dir
}

func consoleShot(t *testing.T, ctx context.Context, dir, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// consoleRun runs browser actions, failing the test on an error.
func consoleRun(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// consoleWaitText waits until the element sel shows text for which ok holds.
func consoleWaitText(t *testing.T, ctx context.Context, sel string, d time.Duration, ok func(string) bool, what string) string {
	t.Helper()
	var got string
	deadline := time.Now().Add(d)
	for {
		tctx, cancel := context.WithTimeout(ctx, time.Second)
		var err error
		got, err = chromedp.Run(tctx, chromedp.Text(chromedp.CSS(sel)))
		cancel()
		if err == nil && ok(strings.TrimSpace(got)) {
			return strings.TrimSpace(got)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s shows %q after %v (err %v)", what, sel, got, d, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// consoleEval evaluates a script on the page, failing the test on an error.
func consoleEval[T any](t *testing.T, ctx context.Context, what, js string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return v
}

// consoleText is the text of the element sel.
func consoleText(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		t.Fatalf("text of %s: %v", sel, err)
	}
	return s
}

func is(want string) func(string) bool { return func(s string) bool { return s == want } }

// consoleFailures makes three groups of rejected messages in q.dlq (five
// "order N not found", three "card declined for payment <uuid>", two
// "schema vN: ..."), all with ids and numbers that differ, plus one parked,
// through a real consumer with the standard middleware. The handler acks
// everything once fixed is set, as a service does once its bug is fixed.
func consoleFailures(t *testing.T, b *mq.Broker) (q string, fixed *atomic.Bool, handled *atomic.Int64) {
	t.Helper()
	p := retry.Fixed(3, 50*time.Millisecond)
	q = testenv.Queue(t, b, p, topology.DeadLetter())
	fixed, handled = &atomic.Bool{}, &atomic.Int64{}
	h := mq.HandlerFunc(func(_ context.Context, d *mq.Delivery) error {
		if fixed.Load() {
			handled.Add(1)
			return nil
		}
		kind, _ := d.Headers["x-kind"].(string)
		n, _ := d.Headers["x-n"].(int32)
		switch kind {
		case "order":
			return middleware.Reject(fmt.Errorf("order %d not found", 1000+n*37))
		case "card":
			return middleware.Reject(fmt.Errorf("card declined for payment %08x-0000-4000-8000-%012d", n+10, n))
		case "schema":
			return middleware.Reject(fmt.Errorf("schema v%d: field amount at offset %d: expected a number", n+2, n*13))
		}
		return middleware.Park(errors.New("needs a person: amount over 10000 EUR"))
	})
	c, err := b.Consume(testenv.Context(t, 20*time.Second), q, h, middleware.Standard(p))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { testenv.Stop(t, c) })
	var msgs []mq.Message
	add := func(kind string, n int32) {
		msgs = append(msgs, mq.Message{
			Body:        []byte(fmt.Sprintf(`{"kind":%q,"n":%d,"customer":{"id":"c-%d","tier":"gold"}}`, kind, n, n)),
			ContentType: "application/json",
			Headers: amqp.Table{"x-kind": kind, "x-n": n,
				"traceparent": fmt.Sprintf("00-%032x-%016x-01", 0xace0000+int(n), n+1)},
		})
	}
	for i := range int32(5) {
		add("order", i)
	}
	for i := range int32(3) {
		add("card", i)
	}
	for i := range int32(2) {
		add("schema", i)
	}
	add("review", 0)
	testenv.Publish(t, b, q, msgs...)
	testenv.WaitCount(t, b, topology.DeadLetterQueue(q), 10, 15*time.Second)
	testenv.WaitCount(t, b, topology.ParkedQueue(q), 1, 15*time.Second)
	return q, fixed, handled
}

var csrfField = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)

// consoleCSRF reads the CSRF token from a page of the console.
func consoleCSRF(t *testing.T, base, page string) string {
	t.Helper()
	_, body := consoleGet(t, base+page, "")
	m := csrfField.FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no CSRF token on %s:\n%s", page, body)
	}
	return m[1]
}

// The whole console in a browser: counts, a queue's three groups, a group,
// a message, delete one, replay a group and watch the counts change, live
// counts, purge with a typed confirmation; a POST without the CSRF token
// (from the page itself and from outside) and a cross-origin POST are
// refused and change nothing.
func TestConsoleBrowser(t *testing.T) {
	testenv.NoLeaks(t)
	b := testenv.Broker(t, mq.Config{})
	q, fixed, handled := consoleFailures(t, b)
	dlq, parked := topology.DeadLetterQueue(q), topology.ParkedQueue(q)

	srv := consoleServer(t, b, ops.ConsoleOptions{Queues: []string{q}})
	shots := consoleShots(t)
	ctx := consoleBrowser(t, 2*time.Minute)
	row := fmt.Sprintf(`tr[data-queue=%q]`, q)

	// Overview: the counts of q.dlq and q.parked.
	consoleRun(t, ctx, "open the overview", chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(chromedp.CSS("#counts")))
	consoleWaitText(t, ctx, row+` [data-count="dlq"]`, 5*time.Second, is("10"), "dead letters on the overview")
	consoleWaitText(t, ctx, row+` [data-count="parked"]`, 5*time.Second, is("1"), "parked on the overview")
	consoleShot(t, ctx, shots, "overview")

	// The queue: three groups, 5, 3 and 2, ids and numbers folded.
	consoleRun(t, ctx, "open the .dlq", chromedp.Click(chromedp.CSS(row+` [data-count="dlq"]`)), chromedp.WaitVisible(chromedp.CSS("#groups")))
	counts := consoleEval[[]string](t, ctx, "read the groups", `[...document.querySelectorAll("tr.group td.count")].map(e => e.textContent.trim())`)
	if strings.Join(counts, ",") != "5,3,2" {
		t.Fatalf("group counts %v, want 5,3,2", counts)
	}
	groupsText := consoleText(t, ctx, "#groups")
	for _, want := range []string{"order <n> not found", "card declined for payment <uuid>", "schema v<n>: field amount at offset <n>: expected a number", "rejected", q} {
		if !strings.Contains(groupsText, want) {
			t.Errorf("the groups lack %q:\n%s", want, groupsText)
		}
	}
	consoleShot(t, ctx, shots, "queue")

	// A group: its five messages.
	consoleRun(t, ctx, "open the largest group", chromedp.Click(chromedp.CSS(`tr.group:first-child a.open`)), chromedp.WaitVisible(chromedp.CSS("#messages")))
	rows := consoleEval[int](t, ctx, "count the group's rows", `document.querySelectorAll("tr.message").length`)
	if rows != 5 {
		t.Fatalf("the group lists %d messages, want 5", rows)
	}
	consoleWaitText(t, ctx, "#group-count", time.Second, is("5"), "the group's count")
	consoleShot(t, ctx, shots, "group")

	// A message: error, attempts used (rejected on attempt 1: the header
	// says 2), trace id, route, headers and the body pretty-printed.
	consoleRun(t, ctx, "open a message", chromedp.Click(chromedp.CSS(`tr.message:first-child a.open`)), chromedp.WaitVisible(chromedp.CSS("#facts")))
	consoleWaitText(t, ctx, "#attempts", time.Second, is("1"), "attempts used")
	consoleWaitText(t, ctx, "#error", time.Second, func(s string) bool { return regexp.MustCompile(`^order \d+ not found$`).MatchString(s) }, "the error")
	consoleWaitText(t, ctx, "#trace", time.Second, func(s string) bool { return regexp.MustCompile(`^0+ace000\d$`).MatchString(s) }, "the trace id")
	consoleWaitText(t, ctx, "#routing-key", time.Second, func(s string) bool { return strings.Contains(s, q) }, "the routing key")
	headers, body := consoleText(t, ctx, "#headers"), consoleText(t, ctx, "#body")
	for _, want := range []string{mq.HeaderReason, mq.HeaderError, mq.HeaderFailedAt, mq.HeaderSourceQueue, mq.HeaderAttempt, "x-kind", "traceparent"} {
		if !strings.Contains(headers, want) {
			t.Errorf("the headers lack %s:\n%s", want, headers)
		}
	}
	if !strings.Contains(body, "\n  \"customer\": {\n    \"id\": ") {
		t.Errorf("the body is not pretty-printed:\n%s", body)
	}
	consoleShot(t, ctx, shots, "message")

	// A POST without the CSRF token is refused: from the page itself...
	status := consoleEval[int](t, ctx, "POST without the token from the page",
		fmt.Sprintf(`fetch(%q, {method: "POST", body: new URLSearchParams({scope: "all"})}).then(r => r.status)`, srv.URL+"/queues/"+url.PathEscape(q)+"/dlq/replay"))
	if status != http.StatusForbidden {
		t.Errorf("a POST without the CSRF token from the page: %d, want 403", status)
	}
	// ... and from outside; with the token but from another origin too.
	token := consoleCSRF(t, srv.URL, "/queues/"+url.PathEscape(q)+"/dlq")
	for _, tc := range []struct {
		name   string
		form   url.Values
		origin string
	}{
		{"no token", url.Values{"scope": {"all"}}, ""},
		{"wrong token", url.Values{"scope": {"all"}, "csrf": {strings.Repeat("0", len(token))}}, ""},
		{"other origin", url.Values{"scope": {"all"}, "csrf": {token}}, "http://evil.example"},
	} {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/queues/"+url.PathEscape(q)+"/dlq/purge", strings.NewReader(url.Values{"confirm": {dlq}, "csrf": tc.form["csrf"]}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if tc.origin != "" {
			req.Header.Set("Origin", tc.origin)
			req.Header.Set("Sec-Fetch-Site", "cross-site")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("purge with %s: %d, want 403", tc.name, resp.StatusCode)
		}
	}
	if n := testenv.Count(t, b, dlq); n != 10 {
		t.Fatalf("refused POSTs changed %s: %d messages, want 10", dlq, n)
	}

	// Delete this message: back on its group, four left.
	consoleRun(t, ctx, "delete the message", chromedp.Click(chromedp.CSS("#delete-message")), chromedp.WaitVisible(chromedp.CSS("#messages")))
	consoleWaitText(t, ctx, "#group-count", 5*time.Second, is("4"), "the group after a delete")
	consoleWaitText(t, ctx, "p.note", time.Second, is("One message deleted."), "the delete's note")
	testenv.WaitCount(t, b, dlq, 9, 5*time.Second)

	// Replay the group (the handler is fixed now): its four messages go back
	// to q, are handled, and the counts drop to five.
	fixed.Store(true)
	consoleRun(t, ctx, "replay the group", chromedp.Click(chromedp.CSS("#replay-group")), chromedp.WaitVisible(chromedp.CSS("#job")))
	consoleWaitText(t, ctx, "#state", 10*time.Second, is("done"), "the replay")
	consoleWaitText(t, ctx, "#moved", time.Second, is("4"), "messages moved")
	consoleShot(t, ctx, shots, "replay")
	testenv.Eventually(t, 10*time.Second, func() bool { return handled.Load() == 4 }, "the four replayed messages handled (%d)", handled.Load())
	consoleRun(t, ctx, "back to the overview", chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(chromedp.CSS("#counts")))
	consoleWaitText(t, ctx, row+` [data-count="dlq"]`, 5*time.Second, is("5"), "dead letters after the replay")

	// Live counts: a new dead letter shows without a reload.
	testenv.Publish(t, b, dlq, mq.Message{Body: []byte("late"), Headers: amqp.Table{mq.HeaderReason: string(mq.ReasonRejected), mq.HeaderError: "order 1 not found", mq.HeaderSourceQueue: q}})
	consoleWaitText(t, ctx, row+` [data-count="dlq"]`, 6*time.Second, is("6"), "the live count")
	consoleWaitText(t, ctx, row+` [data-count="parked"]`, time.Second, is("1"), "parked, untouched")

	// Purge: the button stays disabled until the queue's name is typed; a
	// wrong confirmation sent anyway purges nothing.
	consoleRun(t, ctx, "open the .dlq", chromedp.Click(chromedp.CSS(row+` [data-count="dlq"]`)), chromedp.WaitVisible(chromedp.CSS("#purge")))
	consoleRun(t, ctx, "type a wrong name", chromedp.SendKeys(chromedp.CSS("#purge-confirm"), q))
	disabled := consoleEval[bool](t, ctx, "read the purge button", `document.getElementById("purge").disabled`)
	if !disabled {
		t.Errorf("the purge button is enabled before the queue's full name is typed")
	}
	resp, err := http.PostForm(srv.URL+"/queues/"+url.PathEscape(q)+"/dlq/purge", url.Values{"csrf": {token}, "confirm": {q}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || testenv.Count(t, b, dlq) != 6 {
		t.Fatalf("purge confirmed with the wrong name: %d, %s holds %d", resp.StatusCode, dlq, testenv.Count(t, b, dlq))
	}
	consoleRun(t, ctx, "confirm and purge", chromedp.SendKeys(chromedp.CSS("#purge-confirm"), topology.DeadLetterSuffix))
	consoleShot(t, ctx, shots, "purge")
	consoleRun(t, ctx, "purge", chromedp.Click(chromedp.CSS("#purge")), chromedp.WaitVisible(chromedp.CSS("p.note")))
	consoleWaitText(t, ctx, "p.note", time.Second, is("Purged: 6 messages removed."), "the purge's note")
	if n := testenv.Count(t, b, dlq); n != 0 {
		t.Errorf("%s holds %d after the purge", dlq, n)
	}
	if n := testenv.Count(t, b, parked); n != 1 {
		t.Errorf("%s holds %d, want its 1 untouched", parked, n)
	}
}

// With an access token, the browser opens the console once with ?token=
// and is redirected to a URL without it; the HttpOnly cookie it got
// carries it from then on, and scripts on the page cannot read it.
func TestConsoleBrowserToken(t *testing.T) {
	testenv.NoLeaks(t)
	b := testenv.Broker(t, mq.Config{})
	q := consoleQueue(t, b)
	consoleFill(t, b, q, 2)
	srv := consoleServer(t, b, ops.ConsoleOptions{Queues: []string{q}, Token: "t0ken-for-chromium"})
	ctx := consoleBrowser(t, time.Minute)
	consoleRun(t, ctx, "open without the token", chromedp.Navigate(srv.URL+"/"))
	if body := consoleText(t, ctx, "body"); !strings.Contains(body, "needs its access token") {
		t.Fatalf("without the token the page shows:\n%s", body)
	}
	consoleRun(t, ctx, "open with the token", chromedp.Navigate(srv.URL+"/?token=t0ken-for-chromium"), chromedp.WaitVisible(chromedp.CSS("#counts")))
	if href := consoleEval[string](t, ctx, "read the address", `location.href`); strings.Contains(href, "t0ken") {
		t.Errorf("the token stays in the address: %s", href)
	}
	if cookies := consoleEval[string](t, ctx, "read the cookies", `document.cookie`); strings.Contains(cookies, "t0ken") {
		t.Errorf("a script on the page reads the token: %q", cookies)
	}
	consoleRun(t, ctx, "open the .dlq with the cookie", chromedp.Navigate(srv.URL+"/queues/"+url.PathEscape(q)+"/dlq"), chromedp.WaitVisible(chromedp.CSS("#groups")))
	if n := consoleEval[int](t, ctx, "count the groups", `document.querySelectorAll("tr.group").length`); n != 2 {
		t.Errorf("%d groups, want 2", n)
	}
}
