package ops

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/mq"
)

// testConsole is a console on a broker that is never started: enough for
// everything that refuses a request before it reaches the broker.
func testConsole(t testing.TB, opts ConsoleOptions) *Console {
	t.Helper()
	b := mq.New(mq.Config{URLs: []string{"amqp://guest:guest@127.0.0.1:1/"}, Logger: discardLogger()})
	c, err := NewConsole(b, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

func serve(c *Console, r *http.Request) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	c.ServeHTTP(w, r)
	return w
}

func postReq(target string, form url.Values) *http.Request {
	r := httptest.NewRequest(http.MethodPost, target, strings.NewReader(form.Encode()))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r.RemoteAddr = "127.0.0.1:50000"
	r.Host = "127.0.0.1:8089"
	return r
}

func getReq(target string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, target, nil)
	r.RemoteAddr = "127.0.0.1:50000"
	r.Host = "127.0.0.1:8089"
	return r
}

func TestNormaliseError(t *testing.T) {
	for _, tc := range []struct{ a, b string }{
		{"order 17 not found", "order 4711 not found"},
		{"card declined for payment 0000000a-0000-4000-8000-000000000000", "card declined for payment 9F3A1C2E-1234-4abc-8def-00aa00bb00cc"},
		{"timeout after 1.5s dialing 10.0.0.7:5432", "timeout after 30.25s dialing 10.0.0.12:5432"},
		{"object 5f2b9c81e4 missing", "object a0c4e9f1d2 missing"},
		{"user u-123 over quota (9001 > 9000)", "user u-7 over quota (12 > 10)"},
	} {
		if na, nb := normaliseError(tc.a), normaliseError(tc.b); na != nb {
			t.Errorf("%q → %q and %q → %q: want one group", tc.a, na, tc.b, nb)
		}
	}
	for _, tc := range []struct{ a, b string }{
		{"order not found", "customer not found"},
		{"bad cafe", "bad face"},               // words of hex letters are words
		{"deadbeef missing", "c0ffee missing"}, // only words with a digit fold; "deadbeef" has none
	} {
		if na, nb := normaliseError(tc.a), normaliseError(tc.b); na == nb {
			t.Errorf("%q and %q both → %q: want two groups", tc.a, tc.b, na)
		}
	}
	if got := normaliseError("order 17 not found"); got != "order <n> not found" {
		t.Errorf("normaliseError = %q", got)
	}
}

// Grouping folds ids and numbers, keys reason and source queue too, and
// keeps first and last failure times.
func TestScannerGroups(t *testing.T) {
	sc := newScanner("orders.dlq", 0, func(f failure) bool { return f.Reason == "rejected" }, false)
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for i := range 7 {
		reason := "rejected"
		if i >= 5 {
			reason = "exhausted"
		}
		sc.visit(i+1, amqp.Delivery{Body: []byte(fmt.Sprint(i)), Headers: amqp.Table{
			mq.HeaderReason: reason, mq.HeaderError: fmt.Sprintf("order %d not found", i*31),
			mq.HeaderSourceQueue: "orders", mq.HeaderFailedAt: at.Add(time.Duration(i) * time.Minute), mq.HeaderAttempt: int32(3),
		}})
	}
	s := sc.done(7)
	if len(s.Groups) != 2 || s.Groups[0].Count != 5 || s.Groups[1].Count != 2 {
		t.Fatalf("groups %+v", s.Groups)
	}
	g := s.Groups[0]
	if g.Reason != "rejected" || g.Error != "order <n> not found" || g.Source != "orders" || !g.First.Equal(at) || !g.Last.Equal(at.Add(4*time.Minute)) {
		t.Errorf("group %+v", g)
	}
	if s.Picked != 5 || len(s.Page) != 5 || s.Page[0].AttemptsUsed != 2 {
		t.Errorf("picked %d, page %d, attempts used %d", s.Picked, len(s.Page), s.Page[0].AttemptsUsed)
	}
	if s.Page[0].Key == s.Page[1].Key {
		t.Errorf("two different messages share the key %s", s.Page[0].Key)
	}
}

func TestFailureRoute(t *testing.T) {
	var n normaliser
	d := amqp.Delivery{Exchange: "", RoutingKey: "orders.dlq", Headers: amqp.Table{
		mq.HeaderOriginalExchange: "shop", mq.HeaderOriginalRoutingKey: "order.placed",
		"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
	}}
	f := newFailure("orders.dlq", 1, d, &n)
	if f.OriginalExchange != "shop" || f.OriginalRoutingKey != "order.placed" || f.TraceID != "0af7651916cd43dd8448eb211c80319c" || f.AttemptsUsed != -1 {
		t.Errorf("with the original headers: %+v", f)
	}
	d.Headers = amqp.Table{"x-death": []any{amqp.Table{"exchange": "shop", "routing-keys": []any{"order.paid"}}}}
	if f := newFailure("orders.dlq", 1, d, &n); f.OriginalExchange != "shop" || f.OriginalRoutingKey != "order.paid" {
		t.Errorf("from x-death: %+v", f)
	}
	d.Headers = nil
	if f := newFailure("orders.dlq", 1, d, &n); f.OriginalRoutingKey != "orders.dlq" || !strings.Contains(f.RouteFrom, "delivery") {
		t.Errorf("from the delivery: %+v", f)
	}
}

func TestRedactText(t *testing.T) {
	in := "dial amqp://app:s3cret@rabbit:5672/prod failed; see https://wiki/x and http://u:p4ss@mgmt:15672/?token=abc"
	out := redactText(in)
	for _, secret := range []string{"s3cret", "p4ss", "abc"} {
		if strings.Contains(out, secret) {
			t.Errorf("redactText left %q in: %s", secret, out)
		}
	}
	if !strings.Contains(out, "https://wiki/x") || !strings.Contains(out, "rabbit:5672/prod") {
		t.Errorf("redactText changed more than credentials: %s", out)
	}
}

func TestShowBody(t *testing.T) {
	for _, tc := range []struct {
		body []byte
		kind string
		has  string
	}{
		{nil, "empty", ""},
		{[]byte(`{"a":{"b":1}}`), "json", "{\n  \"a\": {\n    \"b\": 1\n  }\n}"},
		{[]byte("plain text\nline two"), "text", "line two"},
		{[]byte{0, 1, 2, 0xff, 'A'}, "binary", "00 01 02 ff 41"},
	} {
		got := showBody(tc.body)
		if got.Kind != tc.kind || !strings.Contains(got.Text, tc.has) {
			t.Errorf("showBody(%q) = %+v, want %s containing %q", tc.body, got, tc.kind, tc.has)
		}
	}
	if got := showBody(make([]byte, 5000)); !got.Cut || got.Kind != "binary" {
		t.Errorf("a large binary body is not cut: %+v", got)
	}
}

// Every action needs the page's CSRF token; a read-only console refuses
// them all; a cross-origin POST is refused even with the token.
func TestConsoleRefusesActions(t *testing.T) {
	c := testConsole(t, ConsoleOptions{Queues: []string{"orders"}})
	for _, path := range []string{"/queues/orders/dlq/replay", "/queues/orders/dlq/delete", "/queues/orders/dlq/purge", "/jobs/x/stop"} {
		for _, form := range []url.Values{{}, {"csrf": {"nope"}}, {"csrf": {strings.ToUpper(c.csrf)}}} {
			form.Set("scope", "all")
			form.Set("confirm", "orders.dlq")
			if w := serve(c, postReq(path, form)); w.Code != http.StatusForbidden || !strings.Contains(w.Body.String(), "CSRF") {
				t.Errorf("POST %s with %v: %d %q, want 403", path, form, w.Code, w.Body.String())
			}
		}
	}
	r := postReq("/queues/orders/dlq/purge", url.Values{"csrf": {c.csrf}, "confirm": {"orders.dlq"}})
	r.Header.Set("Origin", "https://evil.example")
	r.Header.Set("Sec-Fetch-Site", "cross-site")
	if w := serve(c, r); w.Code != http.StatusForbidden {
		t.Errorf("cross-origin POST with the token: %d, want 403", w.Code)
	}
	ro := testConsole(t, ConsoleOptions{Queues: []string{"orders"}, ReadOnly: true})
	if w := serve(ro, postReq("/queues/orders/dlq/purge", url.Values{"csrf": {ro.csrf}, "confirm": {"orders.dlq"}})); w.Code != http.StatusForbidden || !strings.Contains(w.Body.String(), "read-only") {
		t.Errorf("read-only console, POST with the token: %d %q", w.Code, w.Body.String())
	}
	// A queue the console does not watch is not reached, token or not.
	if w := serve(c, postReq("/queues/payments/dlq/purge", url.Values{"csrf": {c.csrf}, "confirm": {"payments.dlq"}})); w.Code != http.StatusNotFound {
		t.Errorf("purge of an unwatched queue: %d, want 404", w.Code)
	}
}

func TestLoopbackAddr(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:8089": true, "127.1.2.3:1": true, "[::1]:8089": true, "localhost:8089": true,
		"0.0.0.0:8089": false, ":8089": false, "[::]:8089": false, "192.0.2.1:8089": false,
		"example.com:80": false, "127.0.0.1": false, "": false,
	} {
		if got := LoopbackAddr(addr); got != want {
			t.Errorf("LoopbackAddr(%q) = %t, want %t", addr, got, want)
		}
	}
}

func TestConsoleListen(t *testing.T) {
	c := testConsole(t, ConsoleOptions{})
	for _, addr := range []string{"0.0.0.0:0", ":0", "[::]:0", "192.0.2.1:8089", "example.com:80"} {
		if ln, err := c.Listen(addr); !errors.Is(err, ErrInsecureListen) {
			if ln != nil {
				ln.Close()
			}
			t.Errorf("Listen(%q) without a token: %v, want ErrInsecureListen", addr, err)
		}
	}
	for _, addr := range []string{"127.0.0.1:0", "localhost:0"} {
		ln, err := c.Listen(addr)
		if err != nil {
			t.Errorf("Listen(%q): %v", addr, err)
			continue
		}
		ln.Close()
	}
	withToken := testConsole(t, ConsoleOptions{Token: "t0ken"})
	ln, err := withToken.Listen("0.0.0.0:0")
	if err != nil {
		t.Fatalf("Listen(0.0.0.0:0) with a token: %v", err)
	}
	ln.Close()
}

// Without a token only loopback clients are answered; with one, every
// request carries it (cookie, set from ?token=, or a bearer header).
func TestConsoleAccess(t *testing.T) {
	c := testConsole(t, ConsoleOptions{})
	r := getReq("/static/console.css")
	if w := serve(c, r); w.Code != http.StatusOK {
		t.Errorf("loopback client: %d", w.Code)
	}
	r.RemoteAddr = "192.0.2.7:4000"
	if w := serve(c, r); w.Code != http.StatusForbidden {
		t.Errorf("remote client without a token configured: %d, want 403", w.Code)
	}

	tc := testConsole(t, ConsoleOptions{Token: "s3cret-token"})
	remote := func(target string) *http.Request { r := getReq(target); r.RemoteAddr = "192.0.2.7:4000"; return r }
	if w := serve(tc, remote("/static/console.css")); w.Code != http.StatusUnauthorized {
		t.Errorf("no token: %d, want 401", w.Code)
	}
	if w := serve(tc, remote("/static/console.css?token=wrong")); w.Code != http.StatusUnauthorized {
		t.Errorf("wrong token: %d, want 401", w.Code)
	}
	w := serve(tc, remote("/static/console.css?token=s3cret-token"))
	if w.Code != http.StatusSeeOther || strings.Contains(w.Header().Get("Location"), "s3cret") {
		t.Fatalf("right token: %d, Location %q", w.Code, w.Header().Get("Location"))
	}
	cookies := w.Result().Cookies()
	if len(cookies) != 1 || !cookies[0].HttpOnly || cookies[0].SameSite != http.SameSiteStrictMode {
		t.Fatalf("cookies %v", cookies)
	}
	r = remote("/static/console.css")
	r.AddCookie(cookies[0])
	if w := serve(tc, r); w.Code != http.StatusOK {
		t.Errorf("with the cookie: %d", w.Code)
	}
	r = remote("/static/console.css")
	r.Header.Set("Authorization", "Bearer s3cret-token")
	if w := serve(tc, r); w.Code != http.StatusOK {
		t.Errorf("with the bearer token: %d", w.Code)
	}
}

// The management API lists the vhost's queues; every .dlq and .parked
// names a source to watch. Its credentials go as basic auth and are never
// rendered.
func TestConsoleManagementDiscovery(t *testing.T) {
	var gotPath, gotUser, gotPass string
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotPath = r.URL.EscapedPath() + "?" + r.URL.RawQuery
		gotUser, gotPass, _ = r.BasicAuth()
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `[{"name":"orders","vhost":"/"},{"name":"orders.dlq","vhost":"/"},{"name":"orders.parked","vhost":"/"},
			{"name":"payments.parked","vhost":"/"},{"name":"audit","vhost":"/"},{"name":"orders.retry.5s","vhost":"/"}]`)
	}))
	defer api.Close()
	u, _ := url.Parse(api.URL)
	u.User = url.UserPassword("ops", "hunter2")
	c := testConsole(t, ConsoleOptions{Queues: []string{"extra.dlq"}, Management: u.String()})
	srcs, err := c.sources(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(srcs, ",") != "extra,orders,payments" {
		t.Errorf("sources %v, want extra,orders,payments", srcs)
	}
	if gotPath != "/api/queues/%2F?columns=name,type" || gotUser != "ops" || gotPass != "hunter2" {
		t.Errorf("asked %s as %s:%s", gotPath, gotUser, gotPass)
	}
	w := serve(c, getReq("/queues/audit/dlq")) // not watched: an error page
	if w.Code != http.StatusNotFound || strings.Contains(w.Body.String(), "hunter2") || !strings.Contains(w.Body.String(), "xxxxx") {
		t.Errorf("page for an unwatched queue: %d\n%s", w.Code, w.Body.String())
	}

	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { http.Error(w, "no", http.StatusUnauthorized) }))
	defer failing.Close()
	fu, _ := url.Parse(failing.URL)
	fu.User = url.UserPassword("ops", "hunter2")
	fc := testConsole(t, ConsoleOptions{Queues: []string{"orders"}, Management: fu.String()})
	srcs, err = fc.sources(context.Background())
	if err == nil || strings.Contains(err.Error(), "hunter2") || !strings.Contains(err.Error(), "401") || strings.Join(srcs, ",") != "orders" {
		t.Errorf("failing management API: %v, %v", srcs, err)
	}
}

func TestNewConsoleOptions(t *testing.T) {
	b := mq.New(mq.Config{URLs: []string{"amqp://127.0.0.1:1/"}, Logger: discardLogger()})
	for _, opts := range []ConsoleOptions{
		{Management: "ftp://x"}, {Management: "http://u:pw@"}, {BasePath: "admin"}, {BasePath: "/admin/"}, {MaxScan: -1},
	} {
		if c, err := NewConsole(b, opts); err == nil {
			_ = c.Close(context.Background())
			t.Errorf("NewConsole(%+v) took it", opts)
		} else if strings.Contains(err.Error(), "pw") {
			t.Errorf("the error shows the password: %v", err)
		}
	}
}

// consoleDeliveries are n dead letters in three groups whose texts carry
// ids and numbers, as a queue of 10 000 failures holds.
func consoleDeliveries(n int) []amqp.Delivery {
	ds := make([]amqp.Delivery, n)
	at := time.Now().Add(-time.Hour)
	for i := range ds {
		var text string
		switch i % 3 {
		case 0:
			text = fmt.Sprintf("order %d not found", 100000+i)
		case 1:
			text = fmt.Sprintf("card declined for payment %08x-0000-4000-8000-%012d", i, i)
		default:
			text = fmt.Sprintf("schema v%d: field amount at offset %d: expected a number", i%7, i*13)
		}
		ds[i] = amqp.Delivery{MessageId: fmt.Sprintf("m-%d", i), ContentType: "application/json", RoutingKey: "orders.dlq",
			Body: []byte(fmt.Sprintf(`{"order":%d,"customer":{"id":"c-%d","items":[1,2,3]}}`, i, i%500)),
			Headers: amqp.Table{mq.HeaderReason: "rejected", mq.HeaderError: text, mq.HeaderSourceQueue: "orders",
				mq.HeaderAttempt: int32(2), mq.HeaderFailedAt: at.Add(time.Duration(i) * time.Millisecond),
				"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}
	}
	return ds
}

// BenchmarkConsoleGroup10k is the console's own share of a queue page
// for a .dlq of 10 000 messages: read each as a failure, group them, and
// render the page (the broker's share is in the integration benchmark).
func BenchmarkConsoleGroup10k(b *testing.B) {
	c := testConsole(b, ConsoleOptions{Queues: []string{"orders"}})
	ds := consoleDeliveries(10000)
	b.ReportAllocs()
	for b.Loop() {
		sc := newScanner("orders.dlq", 0, nil, false)
		for i, d := range ds {
			sc.visit(i+1, d)
		}
		s := sc.done(len(ds))
		if len(s.Groups) != 3 {
			b.Fatalf("%d groups", len(s.Groups))
		}
		w := httptest.NewRecorder()
		c.render(w, getReq("/queues/orders/dlq"), "queue", map[string]any{"Source": "orders", "Kind": "dlq", "Queue": "orders.dlq", "Scan": s})
		if w.Code != http.StatusOK {
			b.Fatal(w.Code)
		}
	}
}

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// A read-only console's pages carry no form; the others carry the CSRF
// token in every one.
func TestConsoleReadOnlyPages(t *testing.T) {
	sc := newScanner("orders.dlq", 0, func(failure) bool { return true }, false)
	for i, d := range consoleDeliveries(6) {
		sc.visit(i+1, d)
	}
	s := sc.done(6)
	pages := map[string]map[string]any{
		"queue":   {"Source": "orders", "Kind": "dlq", "Queue": "orders.dlq", "Scan": s},
		"group":   {"Source": "orders", "Kind": "dlq", "Queue": "orders.dlq", "Scan": s, "Group": s.Groups[0]},
		"message": {"Source": "orders", "Kind": "dlq", "Queue": "orders.dlq", "M": s.Page[0], "Headers": headerRows(s.Page[0].Headers), "Body": showBody(s.Page[0].Body)},
	}
	for _, readOnly := range []bool{false, true} {
		c := testConsole(t, ConsoleOptions{Queues: []string{"orders"}, ReadOnly: readOnly})
		for name, data := range pages {
			w := httptest.NewRecorder()
			c.render(w, getReq("/"), name, data)
			body := w.Body.String()
			forms := strings.Count(body, "<form")
			switch {
			case w.Code != http.StatusOK:
				t.Errorf("%s (read-only %v): %d\n%s", name, readOnly, w.Code, body)
			case readOnly && forms != 0:
				t.Errorf("read-only %s page has %d forms", name, forms)
			case !readOnly && (forms == 0 || strings.Count(body, `name="csrf" value="`+c.csrf+`"`) != forms):
				t.Errorf("%s page: %d forms, not each with the CSRF token", name, forms)
			}
		}
	}
}

// Normalising is idempotent (a group's text is its own group's text) and
// leaves no digit behind.
func FuzzNormaliseError(f *testing.F) {
	for _, s := range []string{"order 17 not found", "payment 0000000a-0000-4000-8000-000000000000 declined", "0x1F at 10.0.0.7:5432", "v3.2.1-rc9", "", "ünïcode 42€"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n := normaliseError(s)
		if again := normaliseError(n); again != n {
			t.Fatalf("normaliseError(%q) = %q, but normaliseError of that = %q", s, n, again)
		}
		if strings.ContainsAny(n, "0123456789") {
			t.Fatalf("normaliseError(%q) = %q keeps a digit", s, n)
		}
	})
}

// No password in a URL survives redactText.
func FuzzRedactText(f *testing.F) {
	f.Add("dial", "app", "s3cretpw", "rabbit:5672")
	f.Fuzz(func(t *testing.T, prefix, user, pass, host string) {
		if len(pass) < 6 || strings.ContainsAny(user+pass+host, "@/?#: \t\n\"'<>%") || strings.Contains(prefix+user+host, pass) || strings.Contains("xxxxx", pass) {
			return
		}
		in := prefix + " amqp://" + user + ":" + pass + "@" + host + "/vh failed"
		if out := redactText(in); strings.Contains(out, pass) {
			t.Fatalf("redactText(%q) = %q shows the password", in, out)
		}
	})
}

// A quorum queue's mark is either count: x-delivery-count (every return up
// to 4.2, failed ones from 4.3), or x-acquired-count (4.3: every return, so
// the only mark on a message a peek gave back with a nack).
func TestPeekedDeliveryCounted(t *testing.T) {
	for _, c := range []struct {
		h    amqp.Table
		want bool
	}{
		{nil, false},
		{amqp.Table{"x-delivery-count": int64(1)}, true},
		{amqp.Table{"x-acquired-count": int64(1)}, true},
		{amqp.Table{mq.HeaderAttempt: int32(2)}, false},
	} {
		if got := peeked("q", 1, amqp.Delivery{Headers: c.h}).DeliveryCounted; got != c.want {
			t.Errorf("headers %v: counted %v, want %v", c.h, got, c.want)
		}
	}
}

// Issue 22 item 8: without a token the console answers only requests
// addressed to a loopback name (a DNS-rebinding page's Host is its own
// name, though its connection comes from 127.0.0.1), and refuses an Origin
// that is not loopback, on GET as on POST. With a token the token guards.
func TestConsoleRefusesForeignHost(t *testing.T) {
	c := testConsole(t, ConsoleOptions{Queues: []string{"orders"}})
	for _, host := range []string{"rebind.attacker.example", "rebind.attacker.example:8089", "127.0.0.1.nip.io:8089", "localhost.attacker.example", ""} {
		r := getReq("/static/console.css")
		r.Host = host
		if w := serve(c, r); w.Code != http.StatusForbidden {
			t.Errorf("GET with Host %q: %d, want 403", host, w.Code)
		}
		p := postReq("/queues/orders/dlq/purge", url.Values{"csrf": {c.csrf}, "confirm": {"orders.dlq"}})
		p.Host = host
		if w := serve(c, p); w.Code != http.StatusForbidden {
			t.Errorf("POST with Host %q: %d, want 403", host, w.Code)
		}
	}
	for _, origin := range []string{"http://rebind.attacker.example:8089", "null", "http://evil.example"} {
		r := getReq("/static/console.css")
		r.Header.Set("Origin", origin)
		if w := serve(c, r); w.Code != http.StatusForbidden {
			t.Errorf("GET with Origin %q: %d, want 403", origin, w.Code)
		}
	}
	for _, host := range []string{"127.0.0.1:8089", "localhost:8089", "[::1]:8089", "127.0.0.1", "localhost", "LOCALHOST:1"} {
		r := getReq("/static/console.css")
		r.Host = host
		r.Header.Set("Origin", "http://"+host)
		if w := serve(c, r); w.Code != http.StatusOK {
			t.Errorf("GET with Host and Origin %q: %d, want 200", host, w.Code)
		}
	}
	// A page of another site may link to the console (a navigation), but
	// not make the browser read its pages for it (an <img>, a fetch).
	for mode, want := range map[string]int{"navigate": http.StatusOK, "no-cors": http.StatusForbidden, "cors": http.StatusForbidden} {
		r := getReq("/static/console.css")
		r.Header.Set("Sec-Fetch-Site", "cross-site")
		r.Header.Set("Sec-Fetch-Mode", mode)
		if w := serve(c, r); w.Code != want {
			t.Errorf("cross-site GET, Sec-Fetch-Mode %s: %d, want %d", mode, w.Code, want)
		}
	}
	tc := testConsole(t, ConsoleOptions{Token: "s3cret-token"})
	r := getReq("/static/console.css")
	r.Host = "dlq.example.com"
	r.RemoteAddr = "192.0.2.7:4000"
	r.Header.Set("Authorization", "Bearer s3cret-token")
	if w := serve(tc, r); w.Code != http.StatusOK {
		t.Errorf("with a token, Host dlq.example.com: %d, want 200", w.Code)
	}
}

// A source queue whose own name ends in .dlq or .parked can be watched:
// one suffix is stripped from a name given, never two.
func TestConsoleSourcesStripOneSuffix(t *testing.T) {
	got := sourcesOf([]string{"a.parked.dlq", "b.dlq.parked", "c.dlq.dlq", "d", "d.dlq", "e.parked"})
	if want := "a.parked,b.dlq,c.dlq,d,e"; strings.Join(got, ",") != want {
		t.Errorf("sourcesOf = %v, want %s", got, want)
	}
}

// The message page shows the last rung the message waited in, classic or
// durable, when the broker's x-death names one, and nothing otherwise.
func TestConsoleMessageLastRung(t *testing.T) {
	c := testConsole(t, ConsoleOptions{Queues: []string{"orders"}})
	for rung, want := range map[string]bool{"orders.retry.30s.quorum": true, "orders.retry.2m": true, "orders": false} {
		d := consoleDeliveries(1)[0]
		d.Headers["x-death"] = []any{amqp.Table{"queue": rung, "reason": "expired", "count": int64(1)}}
		sc := newScanner("orders.dlq", 0, func(failure) bool { return true }, false)
		sc.visit(1, d)
		m := sc.done(1).Page[0]
		w := httptest.NewRecorder()
		c.render(w, getReq("/"), "message", map[string]any{"Source": "orders", "Kind": "dlq", "Queue": "orders.dlq", "M": m, "Headers": headerRows(m.Headers), "Body": showBody(m.Body)})
		body := w.Body.String()
		if got := strings.Contains(body, `<dt>Last rung</dt><dd id="last-rung">`+rung+`</dd>`); got != want || w.Code != http.StatusOK {
			t.Errorf("x-death naming %s: the page shows it as the last rung: %v, want %v (status %d)", rung, got, want, w.Code)
		}
	}
}
