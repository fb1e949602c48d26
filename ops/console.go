package ops

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/topology"
)

// ErrInsecureListen is returned by Console.Listen for an address that is
// not loopback when the console has no access token.
var ErrInsecureListen = errors.New("ops: console: a non-loopback address needs an access token")

// DefaultConsoleMaxScan is ConsoleOptions.MaxScan's default.
const DefaultConsoleMaxScan = 20000

// ConsoleOptions adjust a Console. The zero value watches no queue, allows
// every action, needs no token (and so answers loopback clients only) and
// is mounted at the root.
type ConsoleOptions struct {
	// Queues are the source queues to watch: the console shows each one's
	// <q>.dlq and <q>.parked (a name given with either suffix counts as its
	// source, one suffix stripped: to watch a source named x.dlq, give it
	// as x.dlq.dlq). A service passes its own topology's queues here.
	Queues []string
	// Management is the RabbitMQ management API's base URL
	// (http://user:pass@host:15672). When set, every queue with a .dlq or
	// .parked in Vhost is watched too, looked up again at most every few
	// seconds. Its credentials are sent as basic auth and never shown.
	Management string
	// Vhost is the virtual host asked of the management API. Default "/".
	Vhost string
	// ReadOnly hides every action and refuses every POST.
	ReadOnly bool
	// Token is the access token. When set, every request must carry it (as
	// the cookie the page sets after ?token=..., or as Authorization:
	// Bearer); when empty, only loopback clients are answered and Listen
	// refuses other addresses.
	Token string
	// BasePath is the path the console is mounted at behind
	// http.StripPrefix ("/admin/dlq"), for its links. Default: the root.
	BasePath string
	// MaxScan caps how many messages of a queue a page reads to group
	// them. Default DefaultConsoleMaxScan.
	MaxScan int
	// Logger receives a record of every action (acemq.console.deleted,
	// .purged, .replay.started, .replay.done, .replay.stopped, each with
	// the queue and, where a request started it, the client's address).
	// Default: the broker's.
	Logger *slog.Logger
	// Client is the HTTP client for the management API. Default: one with
	// a 10 s timeout.
	Client *http.Client
}

// Console is the dead-letter web console: an http.Handler that shows every
// watched queue's .dlq and .parked counts, a queue's failures grouped by
// reason and error text, one message in full, and replays (one, a group,
// all — through Replay), deletes and purges. See the package
// documentation. Close stops the replays it runs.
type Console struct {
	b       *mq.Broker
	opts    ConsoleOptions
	log     *slog.Logger
	csrf    string
	handler http.Handler
	pages   map[string]*template.Template

	ctx    context.Context // ends with Close; every job runs under it
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	jobs   map[string]*consoleJob
	order  []string // job ids, oldest first
	closed bool
	found  discovered
	snaps  map[string]snapshot // by queue
}

// snapshot is the messages of a queue as the last full look saw them, so
// the pages after it (a group, a message, the next page) need not read
// 10 000 messages again. It is used while younger than snapshotTTL and the
// queue still holds as many messages; every action on the queue drops it.
type snapshot struct {
	at       time.Time
	held     int
	failures []failure
}

// lookTimeout bounds one look at a queue for a page.
const lookTimeout = 30 * time.Second

// snapshotTTL is how long a snapshot is used.
const snapshotTTL = 5 * time.Second

type discovered struct {
	at    time.Time
	names []string
	types map[string]string // queue → its type, as the management API says
	err   error
}

//go:embed console
var consoleFiles embed.FS

// NewConsole makes the console for b. It fails on options it cannot use.
func NewConsole(b *mq.Broker, opts ConsoleOptions) (*Console, error) {
	if b == nil {
		return nil, errors.New("ops: console: the broker is nil")
	}
	if opts.Management != "" {
		u, err := url.Parse(opts.Management)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("ops: console: Management %s is not an http:// or https:// URL", mq.Redact(opts.Management))
		}
	}
	if opts.BasePath != "" && (!strings.HasPrefix(opts.BasePath, "/") || strings.HasSuffix(opts.BasePath, "/")) {
		return nil, fmt.Errorf("ops: console: BasePath %q must start with / and not end with it", opts.BasePath)
	}
	if opts.MaxScan < 0 {
		return nil, fmt.Errorf("ops: console: MaxScan is %d, must not be negative", opts.MaxScan)
	}
	if opts.MaxScan == 0 {
		opts.MaxScan = DefaultConsoleMaxScan
	}
	opts.MaxScan = min(opts.MaxScan, maxPrefetch)
	if opts.Vhost == "" {
		opts.Vhost = "/"
	}
	if opts.Client == nil {
		opts.Client = &http.Client{Timeout: 10 * time.Second}
	}
	opts.Queues = sourcesOf(opts.Queues)
	c := &Console{b: b, opts: opts, log: opts.Logger, jobs: map[string]*consoleJob{}, snaps: map[string]snapshot{}}
	if c.log == nil {
		c.log = b.Logger()
	}
	var raw [24]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return nil, fmt.Errorf("ops: console: CSRF token: %w", err)
	}
	c.csrf = hex.EncodeToString(raw[:])
	pages, err := parsePages(opts.BasePath)
	if err != nil {
		return nil, err
	}
	c.pages = pages
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.handler = http.NewCrossOriginProtection().Handler(c.routes())
	return c, nil
}

// sourcesOf returns the distinct source queues named, with one .dlq or
// .parked suffix stripped (never two: the .dlq of a source named
// x.parked is x.parked.dlq).
func sourcesOf(names []string) []string {
	var out []string
	for _, n := range names {
		if s, ok := strings.CutSuffix(n, topology.DeadLetterSuffix); ok {
			n = s
		} else {
			n = strings.TrimSuffix(n, topology.ParkedSuffix)
		}
		if n != "" && !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// Close stops every replay the console runs (between two messages, as
// cancelling Replay does) and waits for them. Requests after Close get 503.
func (c *Console) Close(ctx context.Context) error {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.cancel()
	done := make(chan struct{})
	go func() { c.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("ops: console: close: replays still stopping: %w", ctx.Err())
	}
}

// Listen opens a TCP listener on addr for Serve. An address that is not
// loopback (127.0.0.0/8, ::1, localhost) is refused with ErrInsecureListen
// unless the console has an access token.
func (c *Console) Listen(addr string) (net.Listener, error) {
	if c.opts.Token == "" && !LoopbackAddr(addr) {
		return nil, fmt.Errorf("%w: %q (give a token, or listen on 127.0.0.1)", ErrInsecureListen, addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("ops: console: listen: %w", err)
	}
	return ln, nil
}

// LoopbackAddr reports whether addr (host:port) is a loopback address:
// 127.0.0.0/8, ::1 or localhost. Console.Listen refuses any other address
// unless the console has an access token; a command can check its flag
// with it before it dials the broker.
func LoopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Serve answers on ln until ctx ends, then shuts the server down (waiting
// up to 5 s for requests in flight) and closes the console.
func (c *Console) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{Handler: c, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	var err error
	served := false
	select {
	case <-ctx.Done():
	case err = <-errc:
		served = true
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if srv.Shutdown(sctx) != nil {
		// Requests still running past the grace period: closing their
		// connections ends their contexts, so none outlives Serve unowned.
		_ = srv.Close()
	}
	if !served {
		<-errc // Serve returns as soon as Shutdown closed the listener
	}
	if cerr := c.Close(sctx); cerr != nil && err == nil {
		err = cerr
	}
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// ServeHTTP answers one request: the access check, then the page or
// action (actions also need the CSRF token and a same-origin request).
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cache-Control", "no-store")
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		http.Error(w, "the console is closed", http.StatusServiceUnavailable)
		return
	}
	if !c.admit(w, r) {
		return
	}
	c.handler.ServeHTTP(w, r)
}

const tokenCookie = "acemq_console_token"

// admit checks the access token, or, without one, that the client is on
// loopback. It answers the request itself when it says no.
func (c *Console) admit(w http.ResponseWriter, r *http.Request) bool {
	if c.opts.Token == "" {
		host, _, err := net.SplitHostPort(r.RemoteAddr)
		if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
			http.Error(w, "this console answers loopback clients only (it has no access token)", http.StatusForbidden)
			return false
		}
		// A page of another site whose name the attacker made resolve to
		// 127.0.0.1 (DNS rebinding) connects from loopback too; its
		// requests carry that name as their Host (and Origin).
		if !loopbackHost(r.Host) {
			c.log.Warn("acemq.console.host.refused", "host", r.Host, "path", r.URL.Path)
			http.Error(w, "this console answers requests to a loopback address or localhost only (it has no access token)", http.StatusForbidden)
			return false
		}
		// Another site's page may link here, but not have the browser
		// fetch a page for it (an <img> or a script reading a look).
		if r.Header.Get("Sec-Fetch-Site") == "cross-site" && r.Header.Get("Sec-Fetch-Mode") != "navigate" {
			http.Error(w, "this console does not answer requests another site's page makes", http.StatusForbidden)
			return false
		}
		if o := r.Header.Get("Origin"); o != "" {
			u, err := url.Parse(o)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || !loopbackHost(u.Host) {
				c.log.Warn("acemq.console.origin.refused", "origin", o, "path", r.URL.Path)
				http.Error(w, "this console answers pages of a loopback address or localhost only (it has no access token)", http.StatusForbidden)
				return false
			}
		}
		return true
	}
	if q := r.URL.Query().Get("token"); q != "" && r.Method == http.MethodGet {
		if !sameSecret(q, c.opts.Token) {
			http.Error(w, "wrong access token", http.StatusUnauthorized)
			return false
		}
		http.SetCookie(w, &http.Cookie{Name: tokenCookie, Value: c.opts.Token, Path: c.link(), HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
		u := *r.URL
		v := u.Query()
		v.Del("token")
		u.RawQuery = v.Encode()
		http.Redirect(w, r, c.opts.BasePath+u.RequestURI(), http.StatusSeeOther)
		return false
	}
	if ck, err := r.Cookie(tokenCookie); err == nil && sameSecret(ck.Value, c.opts.Token) {
		return true
	}
	if bearer, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && sameSecret(bearer, c.opts.Token) {
		return true
	}
	http.Error(w, "this console needs its access token: open it once with ?token=...", http.StatusUnauthorized)
	return false
}

// loopbackHost reports whether a Host header (host or host:port) names a
// loopback address (127.0.0.0/8, ::1) or localhost: names no other site
// can make a browser send to this console.
func loopbackHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	} else {
		host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func sameSecret(a, b string) bool { return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1 }

// action checks a POST: not read-only, and carrying the page's CSRF token.
// (The same-origin check is http.CrossOriginProtection's, before it.)
func (c *Console) action(w http.ResponseWriter, r *http.Request) bool {
	if c.opts.ReadOnly {
		http.Error(w, "the console is read-only", http.StatusForbidden)
		return false
	}
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	if err := r.ParseForm(); err != nil {
		http.Error(w, "bad form", http.StatusBadRequest)
		return false
	}
	if !sameSecret(r.PostForm.Get("csrf"), c.csrf) {
		c.log.Warn("acemq.console.csrf.refused", "path", r.URL.Path)
		http.Error(w, "missing or wrong CSRF token: reload the page and try again", http.StatusForbidden)
		return false
	}
	return true
}

func (c *Console) routes() *http.ServeMux {
	m := http.NewServeMux()
	static, _ := fs.Sub(consoleFiles, "console/static")
	m.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	m.HandleFunc("GET /{$}", c.overview)
	m.HandleFunc("GET /api/counts", c.apiCounts)
	m.HandleFunc("GET /queues/{queue}/{kind}", c.queuePage)
	m.HandleFunc("GET /queues/{queue}/{kind}/groups/{group}", c.groupPage)
	m.HandleFunc("GET /queues/{queue}/{kind}/messages/{key}", c.messagePage)
	m.HandleFunc("POST /queues/{queue}/{kind}/replay", c.replay)
	m.HandleFunc("POST /queues/{queue}/{kind}/delete", c.delete)
	m.HandleFunc("POST /queues/{queue}/{kind}/purge", c.purge)
	m.HandleFunc("GET /jobs/{id}", c.jobPage)
	m.HandleFunc("GET /api/jobs/{id}", c.apiJob)
	m.HandleFunc("POST /jobs/{id}/stop", c.stopJob)
	return m
}

// link is the console's path for the given segments, each escaped.
func (c *Console) link(segs ...string) string { return consolePath(c.opts.BasePath, segs...) }

// consolePath is the path below base for the given segments, each escaped;
// base alone ends in "/".
func consolePath(base string, segs ...string) string {
	var sb strings.Builder
	sb.WriteString(base)
	for _, s := range segs {
		sb.WriteByte('/')
		sb.WriteString(url.PathEscape(s))
	}
	if len(segs) == 0 {
		sb.WriteByte('/')
	}
	return sb.String()
}

// sources are the watched source queues: the options' and the management
// API's (looked up at most every 5 s; its error is returned with the
// options' queues).
func (c *Console) sources(ctx context.Context) ([]string, error) {
	if c.opts.Management == "" {
		return c.opts.Queues, nil
	}
	c.mu.Lock()
	f := c.found
	c.mu.Unlock()
	if f.at.IsZero() || time.Since(f.at) > 5*time.Second {
		names, types, err := c.discover(ctx)
		f = discovered{at: time.Now(), names: names, types: types, err: err}
		c.mu.Lock()
		c.found = f
		c.mu.Unlock()
	}
	return sourcesOf(append(slices.Clone(c.opts.Queues), f.names...)), f.err
}

// discover asks the management API for the vhost's queues and returns the
// source of every .dlq and .parked among them, and the type of each of
// those.
func (c *Console) discover(ctx context.Context) ([]string, map[string]string, error) {
	u, err := url.Parse(c.opts.Management)
	if err != nil {
		return nil, nil, errors.New("ops: console: the management URL does not parse")
	}
	user := u.User
	u.User = nil
	endpoint := strings.TrimRight(u.String(), "/") + "/api/queues/" + url.PathEscape(c.opts.Vhost) + "?columns=name,type"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("ops: console: management API %s: %w", mq.Redact(c.opts.Management), err)
	}
	if user != nil {
		pass, _ := user.Password()
		req.SetBasicAuth(user.Username(), pass)
	}
	resp, err := c.opts.Client.Do(req)
	if err != nil {
		// The client's error quotes the URL, which carries no credentials.
		return nil, nil, fmt.Errorf("ops: console: management API: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, nil, fmt.Errorf("ops: console: management API %s answered %s", mq.Redact(c.opts.Management), resp.Status)
	}
	var queues []struct {
		Name string `json:"name"`
		Type string `json:"type"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(&queues); err != nil {
		return nil, nil, fmt.Errorf("ops: console: management API %s: reading /api/queues: %w", mq.Redact(c.opts.Management), err)
	}
	var names []string
	types := map[string]string{}
	for _, q := range queues {
		if strings.HasSuffix(q.Name, topology.DeadLetterSuffix) || strings.HasSuffix(q.Name, topology.ParkedSuffix) {
			names = append(names, q.Name)
			types[q.Name] = q.Type
		}
	}
	return sourcesOf(names), types, nil
}

// target resolves a page's {queue} and {kind} to the .dlq or .parked
// queue, refusing queues the console does not watch.
func (c *Console) target(w http.ResponseWriter, r *http.Request) (source, queue string, ok bool) {
	source, kind := r.PathValue("queue"), r.PathValue("kind")
	srcs, _ := c.sources(r.Context())
	if !slices.Contains(srcs, source) {
		c.fail(w, r, http.StatusNotFound, fmt.Errorf("%q is not a queue this console watches", source))
		return "", "", false
	}
	switch kind {
	case "dlq":
		queue = topology.DeadLetterQueue(source)
	case "parked":
		queue = topology.ParkedQueue(source)
	default:
		c.fail(w, r, http.StatusNotFound, fmt.Errorf("%q is neither dlq nor parked", kind))
		return "", "", false
	}
	// While a replay runs on the queue nothing else looks at it: a look
	// holds its messages for a moment, and the replay would find it empty.
	if j := c.running(queue); j != nil {
		if r.Method == http.MethodGet {
			http.Redirect(w, r, c.link("jobs", j.ID), http.StatusSeeOther)
		} else {
			c.fail(w, r, http.StatusConflict, fmt.Errorf("a replay of %s is running (%s): wait for it or stop it", queue, j.Label))
		}
		return "", "", false
	}
	return source, queue, true
}

// countRow is one watched queue on the overview.
type countRow struct {
	Source       string
	DLQ, Parked  QueueCount
	SourceExists bool
}

func (c *Console) counts(ctx context.Context) ([]countRow, error) {
	srcs, derr := c.sources(ctx)
	rows := make([]countRow, 0, len(srcs))
	for _, s := range srcs {
		cs, err := Count(ctx, c.b, topology.DeadLetterQueue(s), topology.ParkedQueue(s))
		if err != nil {
			return rows, err
		}
		rows = append(rows, countRow{Source: s, DLQ: cs[0], Parked: cs[1]})
	}
	return rows, derr
}

func (c *Console) overview(w http.ResponseWriter, r *http.Request) {
	rows, err := c.counts(r.Context())
	c.render(w, r, "overview", map[string]any{"Rows": rows, "Error": errText(err), "Jobs": c.recentJobs()})
}

func (c *Console) apiCounts(w http.ResponseWriter, r *http.Request) {
	rows, err := c.counts(r.Context())
	type entry struct {
		Source string `json:"source"`
		DLQ    int    `json:"dlq"`
		Parked int    `json:"parked"`
	}
	out := struct {
		Queues []entry `json:"queues"`
		Error  string  `json:"error,omitempty"`
	}{Error: errText(err)}
	for _, row := range rows {
		out.Queues = append(out.Queues, entry{row.Source, row.DLQ.Ready, row.Parked.Ready})
	}
	writeJSON(w, out)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func (c *Console) queuePage(w http.ResponseWriter, r *http.Request) {
	source, queue, ok := c.target(w, r)
	if !ok {
		return
	}
	s, err := c.look(r.Context(), queue, 0, nil, false)
	if err != nil && !errors.Is(err, mq.ErrNotFound) {
		c.fail(w, r, http.StatusBadGateway, err)
		return
	}
	c.render(w, r, "queue", map[string]any{"Source": source, "Kind": r.PathValue("kind"), "Queue": queue,
		"Missing": errors.Is(err, mq.ErrNotFound), "Scan": s, "Done": r.URL.Query().Get("done"), "N": r.URL.Query().Get("n")})
}

func (c *Console) groupPage(w http.ResponseWriter, r *http.Request) {
	source, queue, ok := c.target(w, r)
	if !ok {
		return
	}
	id := r.PathValue("group")
	offset, _ := strconv.Atoi(r.URL.Query().Get("from"))
	offset = max(offset, 0)
	s, err := c.look(r.Context(), queue, offset, func(f failure) bool { return f.Group == id }, false)
	if err != nil {
		c.fail(w, r, http.StatusBadGateway, err)
		return
	}
	var g *failureGroup
	for _, x := range s.Groups {
		if x.ID == id {
			g = x
		}
	}
	if g == nil && r.URL.Query().Get("done") == "deleted" { // its last message
		http.Redirect(w, r, c.link("queues", source, r.PathValue("kind"))+"?done=deleted", http.StatusSeeOther)
		return
	}
	if g == nil {
		c.fail(w, r, http.StatusNotFound, fmt.Errorf("no group %q in %s (it may have been replayed or deleted)", id, queue))
		return
	}
	next := 0
	if offset+len(s.Page) < s.Picked {
		next = offset + len(s.Page)
	}
	c.render(w, r, "group", map[string]any{"Source": source, "Kind": r.PathValue("kind"), "Queue": queue, "Scan": s, "Group": g,
		"From": offset, "Next": next, "Done": r.URL.Query().Get("done")})
}

func (c *Console) messagePage(w http.ResponseWriter, r *http.Request) {
	source, queue, ok := c.target(w, r)
	if !ok {
		return
	}
	key := r.PathValue("key")
	s, err := c.look(r.Context(), queue, 0, func(f failure) bool { return messageKey(f.Peeked) == key }, true)
	if err != nil {
		c.fail(w, r, http.StatusBadGateway, err)
		return
	}
	if len(s.Page) == 0 {
		c.fail(w, r, http.StatusNotFound, fmt.Errorf("no message %q in %s (it may have been replayed or deleted)", key, queue))
		return
	}
	f := s.Page[0]
	c.render(w, r, "message", map[string]any{"Source": source, "Kind": r.PathValue("kind"), "Queue": queue, "M": f,
		"Headers": headerRows(f.Headers), "Body": showBody(f.Body)})
}

func (c *Console) replay(w http.ResponseWriter, r *http.Request) {
	if !c.action(w, r) {
		return
	}
	source, queue, ok := c.target(w, r)
	if !ok {
		return
	}
	opts := ReplayOptions{Logger: c.log}
	var label string
	switch scope := r.PostForm.Get("scope"); scope {
	case "all":
		label = "every message"
	case "group":
		id := r.PostForm.Get("group")
		var norm normaliser
		opts.Filter = Filter{Where: func(p Peeked) bool { return norm.group(p) == id }}
		label = "group " + id
	case "message":
		key := r.PostForm.Get("key")
		opts.Filter = Filter{Where: firstWithKey(key)}
		opts.Limit = 1 // stop at it: what comes after is not taken
		label = "message " + key
	default:
		http.Error(w, "scope must be all, group or message", http.StatusBadRequest)
		return
	}
	j, err := c.startJob(source, r.PathValue("kind"), queue, label, r.RemoteAddr, opts)
	if err != nil {
		c.fail(w, r, http.StatusServiceUnavailable, err)
		return
	}
	http.Redirect(w, r, c.link("jobs", j.ID), http.StatusSeeOther)
}

func (c *Console) delete(w http.ResponseWriter, r *http.Request) {
	if !c.action(w, r) {
		return
	}
	source, queue, ok := c.target(w, r)
	if !ok {
		return
	}
	key := r.PostForm.Get("key")
	defer c.forget(queue)
	_, err := deleteUpTo(r.Context(), c.b, queue, Filter{Where: firstWithKey(key)}, 1)
	if err != nil && !errors.Is(err, ErrNoMessage) {
		c.fail(w, r, http.StatusBadGateway, err)
		return
	}
	if err != nil {
		c.fail(w, r, http.StatusNotFound, fmt.Errorf("no message %q in %s (it may have been replayed or deleted)", key, queue))
		return
	}
	c.log.Info("acemq.console.deleted", "queue", queue, "key", key, "client", r.RemoteAddr)
	back := c.link("queues", source, r.PathValue("kind"))
	if g := r.PostForm.Get("group"); g != "" {
		back = c.link("queues", source, r.PathValue("kind"), "groups", g)
	}
	http.Redirect(w, r, back+"?done=deleted", http.StatusSeeOther)
}

func (c *Console) purge(w http.ResponseWriter, r *http.Request) {
	if !c.action(w, r) {
		return
	}
	source, queue, ok := c.target(w, r)
	if !ok {
		return
	}
	if r.PostForm.Get("confirm") != queue {
		c.fail(w, r, http.StatusBadRequest, fmt.Errorf("nothing purged: type the queue's name, %s, to confirm", queue))
		return
	}
	defer c.forget(queue)
	n, err := Purge(r.Context(), c.b, queue)
	if err != nil {
		c.fail(w, r, http.StatusBadGateway, err)
		return
	}
	c.log.Warn("acemq.console.purged", "queue", queue, "messages", n, "client", r.RemoteAddr)
	http.Redirect(w, r, c.link("queues", source, r.PathValue("kind"))+"?done=purged&n="+strconv.Itoa(n), http.StatusSeeOther)
}

// firstWithKey matches one message: the first whose messageKey is key
// (two messages with one key look alike; an action on it acts on one).
func firstWithKey(key string) func(Peeked) bool {
	taken := false
	return func(p Peeked) bool {
		if taken || messageKey(p) != key {
			return false
		}
		taken = true
		return true
	}
}

// look reads queue for a page: from its snapshot when that is still good,
// else from the broker (keeping a snapshot when the whole queue was read).
func (c *Console) look(ctx context.Context, queue string, offset int, pick func(failure) bool, stop bool) (scan, error) {
	sc := newScanner(queue, offset, pick, stop)
	if t := c.queueType(ctx, queue); t != "" && t != "classic" {
		// Said by the management API: a look would count as a delivery
		// (quorum) or cannot be returned (stream). Do not look.
		cs, err := Count(ctx, c.b, queue)
		s := sc.done(0)
		s.Quorum = true
		if err == nil && len(cs) == 1 {
			s.Held = cs[0].Ready
		}
		return s, err
	}
	c.mu.Lock()
	snap, ok := c.snaps[queue]
	c.mu.Unlock()
	if ok && time.Since(snap.at) < snapshotTTL {
		if cs, err := Count(ctx, c.b, queue); err == nil && cs[0].Exists && cs[0].Ready == snap.held {
			sc.s.At = snap.at
			for _, f := range snap.failures {
				if !sc.add(f) {
					break
				}
			}
			return sc.done(snap.held), nil
		}
	}
	sc.keep = !stop
	ctx, cancel := context.WithTimeout(ctx, lookTimeout)
	defer cancel()
	held, err := browse(ctx, c.b, queue, c.opts.MaxScan, time.Second, sc.visit)
	if errors.Is(err, errNotClassic) {
		s := sc.done(held)
		s.Quorum = true
		return s, nil
	}
	s := sc.done(held)
	if err == nil && sc.keep && s.Scanned == held {
		c.mu.Lock()
		c.snaps[queue] = snapshot{at: s.At, held: held, failures: sc.kept}
		c.mu.Unlock()
	}
	return s, err
}

// queueType is queue's type as the management API last said, or "".
func (c *Console) queueType(ctx context.Context, queue string) string {
	if c.opts.Management == "" {
		return ""
	}
	_, _ = c.sources(ctx) // refreshes what the API said when it is old
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.found.types[queue]
}

// forget drops queue's snapshot: an action changed it.
func (c *Console) forget(queue string) {
	c.mu.Lock()
	delete(c.snaps, queue)
	c.mu.Unlock()
}

// fail renders the error page; the error's text has its URLs redacted.
func (c *Console) fail(w http.ResponseWriter, r *http.Request, code int, err error) {
	w.WriteHeader(code)
	c.render(w, r, "error", map[string]any{"Code": code, "Status": http.StatusText(code), "Error": errText(err)})
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return redactText(err.Error())
}
