package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/url"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/alecthomas/kong"
	"github.com/lmittmann/tint"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/ops"
)

// The exit codes (see the package documentation and --help).
const (
	exitOK           = 0
	exitFailed       = 1
	exitUsage        = 2
	exitNoBroker     = 3
	exitLeftBehind   = 4
	exitNotConfirmed = 5
	exitLoginRefused = 6
	exitInterrupted  = 130
)

// exitCodes is the table --help ends with.
const exitCodes = `Exit codes:
  0    done
  1    failed: a queue or message does not exist, the broker refused, a
       replay stopped on an error (what was moved until then stays moved),
       a publish was not confirmed
  2    usage error (unknown command or flag, bad value)
  3    the broker could not be reached (refused, unknown host; with --wait,
       not within --timeout)
  4    a replay finished but left messages it could not place (give --to)
  5    a purge or delete was not confirmed (nothing was changed)
  6    the broker refused the login (user, password, or the vhost)
  130  interrupted

For scripts, install the command (go install
github.com/acemq/acemq-go/cmd/acemq@latest): go run reports every exit
code other than 0 as 1.`

// defaultURL is the local broker, used when neither --url nor AMQP_URL is
// given.
const defaultURL = "amqp://guest:guest@127.0.0.1:5672/"

// progressAbove is the replay size from which a progress bar is shown.
const progressAbove = 100

type cli struct {
	URL     string        `help:"Broker URL (default: $AMQP_URL, else the local broker as guest)." env:"AMQP_URL" placeholder:"amqp://USER:PASS@HOST:5672/VHOST"`
	Timeout time.Duration `help:"How long to wait for the broker to answer." default:"10s"`
	Wait    bool          `help:"Keep trying to connect for --timeout instead of failing at once on a refused connection or an unknown host."`
	JSON    bool          `name:"json" help:"Print the result (or the error) as one JSON object on stdout."`
	Verbose bool          `short:"v" help:"Log connection and debug detail to stderr."`

	Count   countCmd   `cmd:"" help:"Show how many messages are ready in each queue, and its consumers."`
	Peek    peekCmd    `cmd:"" help:"Show messages at the head of a queue without taking them (on a quorum queue this raises their delivery count)."`
	Replay  replayCmd  `cmd:"" help:"Move messages from a .dlq or .parked queue back to the queue they failed on."`
	Purge   purgeCmd   `cmd:"" help:"Delete every ready message in a queue (asks first)."`
	Delete  deleteCmd  `cmd:"" help:"Delete the message with a message id from a queue (asks first)."`
	Publish publishCmd `cmd:"" help:"Publish one message (body from stdin or --file) and wait for the broker's confirm."`
	Console consoleCmd `cmd:"" help:"Serve the dead-letter web console (loopback by default)."`
	Rungs   rungsCmd   `cmd:"" help:"Show a queue's retry rungs of both kinds, classic and durable, and the messages waiting in each."`
	// Further commands register here.
}

// env is what every command runs with.
type env struct {
	ctx    context.Context
	b      *mq.Broker
	in     *bufio.Reader
	out    io.Writer
	stderr io.Writer
	log    *slog.Logger
	// actions logs what an operator did through the console (replay,
	// delete, purge) to stderr, with -v or without.
	actions *slog.Logger
	tty     bool // stderr is a terminal
	json    bool
	// timeout is --timeout, how long to wait for the broker to answer.
	timeout time.Duration
	// result is what --json prints: the command sets it, also when it
	// fails part way.
	result any
	// warnings are printed to stderr (and in --json, included).
	warnings []string
}

func (e *env) warn(format string, args ...any) {
	e.warnings = append(e.warnings, fmt.Sprintf(format, args...))
}

// kongExit carries kong's exit code out of Parse (for --help) without
// ending the process, so run stays testable.
type kongExit int

// codedError is an error with the exit code it ends the command with.
type codedError struct {
	code int
	err  error
}

func (e *codedError) Error() string { return e.err.Error() }
func (e *codedError) Unwrap() error { return e.err }

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) (code int) {
	// --json is known before parsing, so a usage error is JSON too; once
	// parsed, the flag's value decides (kong takes --json=true, =1, …).
	jsonOut := jsonFlag(args)
	fail := func(code int, err error, result any) int {
		fmt.Fprintln(stderr, "acemq: "+printable(oneLine(err.Error())))
		if jsonOut {
			writeJSON(stdout, withError(result, err, code))
		}
		return code
	}

	var c cli
	parser, err := kong.New(&c,
		kong.Name("acemq"),
		kong.Description("AceMQ operator tool: count, peek at, replay, purge, delete and publish messages in RabbitMQ queues, and serve the dead-letter web console.\n\n"+exitCodes),
		kong.Writers(stdout, stderr),
		kong.Exit(func(code int) { panic(kongExit(code)) }),
	)
	if err != nil {
		return fail(exitFailed, err, nil)
	}
	defer func() {
		if r := recover(); r != nil {
			e, ok := r.(kongExit)
			if !ok {
				panic(r)
			}
			code = int(e)
			if code != exitOK {
				code = exitUsage
			}
		}
	}()
	kctx, err := parser.Parse(args)
	if err != nil {
		return fail(exitUsage, fmt.Errorf("%v (see acemq --help)", err), nil)
	}

	jsonOut = c.JSON
	tty := isTerminal(stderr)
	log := slog.New(slog.DiscardHandler)
	actions := slog.New(tint.NewTextHandler(stderr, &tint.Options{Level: slog.LevelInfo, TimeFormat: time.TimeOnly, NoColor: !tty}))
	if c.Verbose {
		log = slog.New(tint.NewTextHandler(stderr, &tint.Options{Level: slog.LevelDebug, TimeFormat: time.TimeOnly, NoColor: !tty}))
		actions = log
	}

	raw := c.URL
	if raw == "" {
		raw = defaultURL
	}
	if err := checkURL(raw); err != nil {
		return fail(exitUsage, err, nil)
	}
	b, err := connect(ctx, raw, c, log)
	if err != nil {
		var ce *codedError
		switch {
		case ctx.Err() != nil:
			return fail(exitInterrupted, errors.New("interrupted"), nil)
		case errors.As(err, &ce):
			return fail(ce.code, ce.err, nil)
		}
		return fail(exitNoBroker, err, nil)
	}
	defer func() {
		// A polite close waits for the broker; interrupted, the command
		// gives it a second, then cuts the connection (Close does).
		grace := 10 * time.Second
		if ctx.Err() != nil {
			grace = time.Second
		}
		cctx, cancel := context.WithTimeout(context.Background(), grace)
		defer cancel()
		_ = b.Close(cctx)
	}()

	e := &env{ctx: ctx, b: b, in: bufio.NewReader(stdin), out: stdout, stderr: stderr, log: log, actions: actions, tty: tty, json: jsonOut, timeout: c.Timeout}
	if jsonOut {
		e.out = io.Discard // the text output; JSON goes to stdout below
	}
	err = kctx.Run(e)
	for _, w := range e.warnings {
		fmt.Fprintln(stderr, "acemq: warning: "+printable(w))
	}
	if jsonOut && len(e.warnings) > 0 {
		e.result = withWarnings(e.result, e.warnings)
	}
	var ce *codedError
	switch {
	case err == nil:
		if jsonOut {
			writeJSON(stdout, e.result)
		}
		return exitOK
	case ctx.Err() != nil:
		// Interrupted: whatever the command stopped on (a move given its
		// publish timeout, say), the run was cut short.
		return fail(exitInterrupted, err, e.result)
	case errors.As(err, &ce):
		return fail(ce.code, ce.err, e.result)
	default:
		return fail(exitFailed, err, e.result)
	}
}

// checkURL refuses, as a usage error, a URL the broker could never be
// reached at, naming it redacted.
func checkURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "amqp" && u.Scheme != "amqps") || u.Host == "" {
		return fmt.Errorf("--url %s: want amqp://USER:PASS@HOST:PORT/VHOST or amqps://…", mq.Redact(raw))
	}
	return nil
}

// connect starts a broker on raw. Without --wait, a refused connection or
// an unknown host fails at once (one TCP dial first) rather than being
// retried for the whole --timeout.
func connect(ctx context.Context, raw string, c cli, log *slog.Logger) (*mq.Broker, error) {
	red := mq.Redact(raw)
	if !c.Wait {
		u, _ := url.Parse(raw)
		port := u.Port()
		if port == "" {
			port = "5672"
			if u.Scheme == "amqps" {
				port = "5671"
			}
		}
		d := net.Dialer{Timeout: c.Timeout}
		conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(u.Hostname(), port))
		if err != nil {
			return nil, fmt.Errorf("cannot reach the broker at %s: %s (give --wait to keep trying for --timeout)", red, dialReason(err))
		}
		_ = conn.Close()
	}
	b := mq.New(mq.Config{URLs: []string{raw}, ConnectionName: "acemq-cli", Logger: log})
	cctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	if err := b.Start(cctx); err != nil {
		_ = b.Close(context.Background())
		var be *mq.BrokerError
		if errors.As(err, &be) && (be.Code == amqp.AccessRefused || be.Code == amqp.NotAllowed) {
			// Known the moment the broker says it (RabbitMQ waits 3 s
			// before it answers a wrong password, as amqp091-go does not
			// tell it the client understands the answer); never retried.
			return nil, &codedError{exitLoginRefused, fmt.Errorf("the broker at %s refused the login: %s (%d)", red, be.Reason, be.Code)}
		}
		return nil, fmt.Errorf("cannot connect to the broker at %s within %v: %v", red, c.Timeout, err)
	}
	return b, nil
}

// dialReason is the part of a dial error an operator acts on.
func dialReason(err error) string {
	var dns *net.DNSError
	if errors.As(err, &dns) {
		return fmt.Sprintf("unknown host %q", dns.Name)
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		var se *os.SyscallError
		if errors.As(op.Err, &se) {
			return se.Err.Error()
		}
		return op.Err.Error()
	}
	return err.Error()
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// jsonFlag reads --json from args the way kong will parse it: --json, or
// --json=<bool> (true, 1, false, 0, …), before a "--" that ends the flags.
func jsonFlag(args []string) bool {
	on := false
	for _, a := range args {
		if a == "--" {
			break
		}
		if a == "--json" {
			on = true
		} else if v, ok := strings.CutPrefix(a, "--json="); ok {
			on, _ = strconv.ParseBool(v)
		}
	}
	return on
}

// printable shows s with every control character (C0, DEL, C1) and every
// invalid byte escaped as Go writes it (\x1b, \u009b), so nothing that
// came from the wire (a message id, a header's name, an error text) can
// move the cursor, retitle the window or ring the bell of the terminal it
// is printed on. Printable text, spaces included, is left as it is.
func printable(s string) string {
	clean := true
	for _, r := range s {
		if r == utf8.RuneError || unicode.IsControl(r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var sb strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			fmt.Fprintf(&sb, `\x%02x`, s[i])
		case unicode.IsControl(r) && r < 0x100:
			fmt.Fprintf(&sb, `\x%02x`, r)
		case unicode.IsControl(r):
			fmt.Fprintf(&sb, `\u%04x`, r)
		default:
			sb.WriteString(s[i : i+size])
		}
		i += size
	}
	return sb.String()
}

func writeJSON(w io.Writer, v any) {
	if v == nil {
		v = map[string]any{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// withError adds "error" and "exit" to a --json result.
func withError(result any, err error, code int) map[string]any {
	m := asMap(result)
	m["error"] = oneLine(err.Error())
	m["exit"] = code
	return m
}

func withWarnings(result any, ws []string) map[string]any {
	m := asMap(result)
	m["warnings"] = ws
	return m
}

func asMap(v any) map[string]any {
	m := map[string]any{}
	if v == nil {
		return m
	}
	b, err := json.Marshal(v)
	if err == nil {
		_ = json.Unmarshal(b, &m)
	}
	return m
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// plainNotFound turns a missing queue into one plain sentence.
func plainNotFound(err error, queue string) error {
	if errors.Is(err, mq.ErrNotFound) {
		return missingQueue(queue)
	}
	return err
}

// missingQueue is every command's one wording for queues that do not
// exist.
func missingQueue(queues ...string) error {
	parts := make([]string, len(queues))
	for i, q := range queues {
		parts[i] = fmt.Sprintf("queue %q does not exist", q)
	}
	return errors.New(strings.Join(parts, "; "))
}

// confirm asks the operator; anything but y/yes (or no answer) is no.
func (e *env) confirm(yes bool, question string) error {
	if yes {
		return nil
	}
	fmt.Fprintf(e.stderr, "%s [y/N] ", question)
	line, _ := e.in.ReadString('\n')
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return nil
	}
	return &codedError{exitNotConfirmed, errors.New("not confirmed; nothing was changed (give --yes to skip the question)")}
}

// filterFlags are the selection flags of peek and replay.
type filterFlags struct {
	Reason    string        `help:"Only messages with this x-acemq-reason (exhausted, rejected, parked, rung-missing)."`
	Error     string        `help:"Only messages whose x-acemq-error contains this text."`
	MessageID string        `name:"message-id" help:"Only the message(s) with this message id."`
	OlderThan time.Duration `name:"older-than" help:"Only messages that failed longer ago than this (e.g. 1h)."`
}

func (f filterFlags) filter() ops.Filter {
	return ops.Filter{Reason: f.Reason, Error: f.Error, MessageId: f.MessageID, OlderThan: f.OlderThan}
}

type countCmd struct {
	Queues []string `arg:"" name:"queue" help:"Queues to count."`
}

// Validate refuses an empty queue name before the broker is dialled: a
// usage error, like any other bad argument.
func (c *countCmd) Validate() error { return named(c.Queues...) }

// named refuses an empty queue name among queues.
func named(queues ...string) error {
	if slices.Contains(queues, "") {
		return errors.New("a queue name is empty")
	}
	return nil
}

type countJSON struct {
	Queue     string `json:"queue"`
	Exists    bool   `json:"exists"`
	Ready     int    `json:"ready"`
	Consumers int    `json:"consumers"`
}

func (c *countCmd) Run(e *env) error {
	counts, err := ops.Count(e.ctx, e.b, c.Queues...)
	rows := make([]countJSON, 0, len(counts))
	tw := tabwriter.NewWriter(e.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "QUEUE\tREADY\tCONSUMERS")
	var missing []string
	for _, qc := range counts {
		rows = append(rows, countJSON{qc.Queue, qc.Exists, qc.Ready, qc.Consumers})
		if !qc.Exists {
			missing = append(missing, qc.Queue)
			fmt.Fprintf(tw, "%s\t-\t(does not exist)\n", qc.Queue)
			continue
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\n", qc.Queue, qc.Ready, qc.Consumers)
	}
	_ = tw.Flush()
	e.result = map[string]any{"queues": rows}
	if err != nil {
		return err
	}
	if len(missing) > 0 {
		return missingQueue(missing...)
	}
	return nil
}

type peekCmd struct {
	Queue string `arg:"" help:"Queue to peek at."`
	Limit int    `short:"n" default:"10" help:"How many messages to show, from the head."`
	filterFlags
}

// Validate refuses an empty queue name before the broker is dialled.
func (c *peekCmd) Validate() error { return named(c.Queue) }

// contractHeaders are shown by name; the others are listed after them.
var contractHeaders = map[string]bool{
	mq.HeaderAttempt: true, mq.HeaderReason: true, mq.HeaderError: true, mq.HeaderFailedAt: true,
	mq.HeaderSourceQueue: true, mq.HeaderReplayedAt: true, mq.HeaderReplayedFrom: true,
	mq.HeaderOriginalExchange: true, mq.HeaderOriginalRoutingKey: true,
}

// peekJSON is one message in peek --json.
type peekJSON struct {
	Position           int            `json:"position"`
	MessageID          string         `json:"message_id"`
	CorrelationID      string         `json:"correlation_id,omitempty"`
	ContentType        string         `json:"content_type,omitempty"`
	Timestamp          *time.Time     `json:"timestamp,omitempty"`
	Redelivered        bool           `json:"redelivered"`
	AttemptsUsed       *int           `json:"attempts_used"` // null: unknown (no x-acemq-attempt)
	OriginalExchange   string         `json:"original_exchange"`
	OriginalRoutingKey string         `json:"original_routing_key"`
	SourceQueue        string         `json:"source_queue,omitempty"`
	Reason             string         `json:"reason,omitempty"`
	Error              string         `json:"error,omitempty"`
	FailedAt           *time.Time     `json:"failed_at,omitempty"`
	ReplayedAt         *time.Time     `json:"replayed_at,omitempty"`   // the last replay (x-acemq-replayed-at), if any
	ReplayedFrom       string         `json:"replayed_from,omitempty"` // the queue it was replayed from (x-acemq-replayed-from)
	LastRung           string         `json:"last_rung,omitempty"`     // the last rung it waited in (x-death)
	Headers            map[string]any `json:"headers,omitempty"`
	BodyBytes          int            `json:"body_bytes"`
	Body               string         `json:"body"`
}

func (c *peekCmd) Run(e *env) error {
	if c.Limit < 1 {
		return &codedError{exitUsage, fmt.Errorf("-n/--limit is %d, must be at least 1", c.Limit)}
	}
	msgs, err := ops.PeekMatching(e.ctx, e.b, c.Queue, c.Limit, c.filter())
	rows := make([]peekJSON, 0, len(msgs))
	quorum := false
	for _, m := range msgs {
		printPeeked(e.out, m)
		rows = append(rows, peekRow(m))
		quorum = quorum || m.DeliveryCounted
	}
	e.result = map[string]any{"queue": c.Queue, "messages": rows}
	if quorum {
		e.warn("%s is a quorum queue: up to RabbitMQ 4.2 every peek raised the delivery count (x-delivery-count) of the messages it looked at (4.3 counts only x-acquired-count), and it may have moved them back in the queue; with a delivery limit (20 by default on RabbitMQ 4) a message peeked too often is dropped or dead-lettered by the broker", c.Queue)
	}
	if err != nil {
		return plainNotFound(err, c.Queue)
	}
	switch {
	case len(msgs) == 0 && c.filter().IsZero():
		fmt.Fprintf(e.out, "%s is empty\n", c.Queue)
	case len(msgs) == 0:
		fmt.Fprintf(e.out, "no message in %s matches\n", c.Queue)
	default:
		fmt.Fprintf(e.out, "%d message(s) shown from %s; all left in place\n", len(msgs), c.Queue)
	}
	return nil
}

func peekRow(m ops.Peeked) peekJSON {
	r := peekJSON{Position: m.Position, MessageID: m.MessageId, CorrelationID: m.CorrelationId, ContentType: m.ContentType,
		Redelivered: m.Redelivered, OriginalExchange: m.OriginalExchange, OriginalRoutingKey: m.OriginalRoutingKey,
		SourceQueue: m.SourceQueue, Reason: m.Reason, Error: m.Error, BodyBytes: len(m.Body), Body: m.Preview, LastRung: m.LastRung}
	if m.AttemptsUsed >= 0 {
		n := m.AttemptsUsed
		r.AttemptsUsed = &n
	}
	if !m.Timestamp.IsZero() {
		t := m.Timestamp.UTC()
		r.Timestamp = &t
	}
	if !m.FailedAt.IsZero() {
		t := m.FailedAt.UTC()
		r.FailedAt = &t
	}
	if !m.ReplayedAt.IsZero() {
		t := m.ReplayedAt.UTC()
		r.ReplayedAt = &t
	}
	r.ReplayedFrom = m.ReplayedFrom
	for k, v := range m.Headers {
		if contractHeaders[k] {
			continue
		}
		if r.Headers == nil {
			r.Headers = map[string]any{}
		}
		r.Headers[k] = jsonValue(v)
	}
	return r
}

// jsonValue is a header value as JSON writes it, whole: a table (x-death's
// records) an object, an array an array, each value converted the same
// way; a byte string a string when it is UTF-8 (else "<n bytes>"); a
// timestamp RFC 3339 in UTC; a decimal, NaN or an infinity its text.
func jsonValue(v any) any {
	switch x := v.(type) {
	case amqp.Table:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[k] = jsonValue(e)
		}
		return m
	case []any:
		a := make([]any, len(x))
		for i, e := range x {
			a[i] = jsonValue(e)
		}
		return a
	case []byte:
		if utf8.Valid(x) {
			return string(x)
		}
		return fmt.Sprintf("<%d bytes>", len(x))
	case time.Time:
		return x.UTC().Format(time.RFC3339)
	case amqp.Decimal:
		return fmt.Sprintf("decimal(%d, scale %d)", x.Value, x.Scale)
	case float32:
		return jsonValue(float64(x))
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return fmt.Sprint(x) // JSON has no number for it
		}
		return x
	case nil, string, bool, int, int8, int16, int32, int64, uint8, uint16, uint32, uint64:
		return x
	}
	return fmt.Sprint(v)
}

func printPeeked(w io.Writer, m ops.Peeked) {
	fmt.Fprintf(w, "#%d  message-id=%s", m.Position, printable(orNone(m.MessageId)))
	if m.ContentType != "" {
		fmt.Fprintf(w, "  content-type=%s", printable(m.ContentType))
	}
	if !m.Timestamp.IsZero() {
		fmt.Fprintf(w, "  timestamp=%s", m.Timestamp.UTC().Format(time.RFC3339))
	}
	fmt.Fprintf(w, "  redelivered=%t\n", m.Redelivered)
	// Every name and value here may have come from the wire.
	row := func(k, v string) { fmt.Fprintf(w, "    %-16s %s\n", printable(k)+":", printable(v)) }
	if m.AttemptsUsed >= 0 {
		row("attempts used", fmt.Sprint(m.AttemptsUsed))
	} else {
		row("attempts used", "unknown (no x-acemq-attempt)")
	}
	row("routing key", orNone(m.OriginalRoutingKey))
	if m.OriginalExchange != "" {
		row("exchange", m.OriginalExchange)
	} else {
		row("exchange", "(default exchange)")
	}
	row("route from", m.RouteFrom)
	if m.SourceQueue != "" {
		row("source queue", m.SourceQueue)
	}
	if m.LastRung != "" {
		row("last rung", m.LastRung)
	}
	if m.Reason != "" {
		row("reason", m.Reason)
	}
	if m.Error != "" {
		row("error", ops.Preview([]byte(m.Error), 512))
	}
	if !m.FailedAt.IsZero() {
		row("failed at", m.FailedAt.UTC().Format(time.RFC3339))
	}
	if m.ReplayedFrom != "" || !m.ReplayedAt.IsZero() {
		row("replayed", fmt.Sprintf("%s from %s", m.ReplayedAt.UTC().Format(time.RFC3339), orNone(m.ReplayedFrom)))
	}
	keys := make([]string, 0, len(m.Headers))
	for k := range m.Headers {
		if !contractHeaders[k] {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		row(k, headerValue(m.Headers[k]))
	}
	row("body", fmt.Sprintf("(%d bytes) %s", len(m.Body), m.Preview))
}

func headerValue(v any) string {
	var s string
	switch x := v.(type) {
	case []byte:
		if utf8.Valid(x) {
			s = string(x)
		} else {
			s = fmt.Sprintf("<%d bytes>", len(x))
		}
	default:
		s = fmt.Sprint(x)
	}
	return ops.Preview([]byte(s), 200)
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

type replayCmd struct {
	From   string `arg:"" name:"queue" help:"Queue to replay from: <q>.dlq or <q>.parked."`
	To     string `help:"Send every message to this queue instead of the queue it failed on."`
	Limit  int    `short:"n" help:"Move at most this many messages (default: all that are there when the replay starts)."`
	DryRun bool   `help:"Show where the messages would go; move nothing."`
	filterFlags
}

// Validate refuses an empty queue name before the broker is dialled.
func (c *replayCmd) Validate() error { return named(c.From) }

type replayJSON struct {
	From       string         `json:"from"`
	DryRun     bool           `json:"dry_run"`
	Total      int            `json:"total"`
	Moved      int            `json:"moved"`
	Unmatched  int            `json:"unmatched"`
	Targets    map[string]int `json:"targets"`
	Skipped    []skippedJSON  `json:"skipped"`
	Duplicates int            `json:"duplicates"`
}

type skippedJSON struct {
	MessageID string `json:"message_id"`
	Error     string `json:"error"`
}

func (c *replayCmd) Run(e *env) error {
	if c.Limit < 0 {
		return &codedError{exitUsage, fmt.Errorf("-n/--limit is %d, must not be negative", c.Limit)}
	}
	var bar *progressbar.ProgressBar
	opts := ops.ReplayOptions{To: c.To, Limit: c.Limit, DryRun: c.DryRun, Logger: e.log, Filter: c.filter()}
	opts.Progress = func(done, total int) {
		if bar == nil && total > progressAbove && e.tty && !e.json {
			bar = progressbar.NewOptions(total,
				progressbar.OptionSetWriter(e.stderr),
				progressbar.OptionSetDescription("replay "+c.From),
				progressbar.OptionShowCount(),
				progressbar.OptionThrottle(100*time.Millisecond),
				progressbar.OptionClearOnFinish(),
			)
		}
		if bar != nil {
			_ = bar.Set(done)
		}
	}
	// A missing queue is named in one plain sentence, found by asking the
	// broker rather than by reading ops' error text.
	e.result = replayRow(ops.ReplayResult{From: c.From, DryRun: c.DryRun})
	queues := []string{c.From}
	if c.To != "" {
		queues = append(queues, c.To)
	}
	counts, err := ops.Count(e.ctx, e.b, queues...)
	if err != nil {
		return err
	}
	for _, qc := range counts {
		if !qc.Exists {
			return missingQueue(qc.Queue)
		}
	}
	res, err := ops.Replay(e.ctx, e.b, c.From, opts)
	if bar != nil {
		if err == nil {
			_ = bar.Finish()
		} else {
			_ = bar.Exit()
		}
		fmt.Fprintln(e.stderr)
	}
	e.result = replayRow(res)
	if err != nil {
		if res.Taken > 0 {
			printReplay(e.out, res) // what was moved before it stopped stays moved
		}
		return err
	}
	printReplay(e.out, res)
	if len(res.Skipped) > 0 {
		return &codedError{exitLeftBehind, fmt.Errorf("%d message(s) left in %s: their source queue is unknown (give --to)", len(res.Skipped), c.From)}
	}
	return nil
}

func replayRow(res ops.ReplayResult) replayJSON {
	r := replayJSON{From: res.From, DryRun: res.DryRun, Total: res.Total, Moved: res.Moved, Unmatched: res.Unmatched,
		Targets: res.Targets, Skipped: []skippedJSON{}, Duplicates: res.Duplicates}
	if r.Targets == nil {
		r.Targets = map[string]int{}
	}
	for _, s := range res.Skipped {
		r.Skipped = append(r.Skipped, skippedJSON{s.MessageId, oneLine(s.Err.Error())})
	}
	return r
}

func printReplay(w io.Writer, res ops.ReplayResult) {
	verb := "moved"
	if res.DryRun {
		verb = "dry run: would move"
	}
	fmt.Fprintf(w, "%s %d of %d message(s) from %s", verb, res.Moved, res.Total, res.From)
	targets := make([]string, 0, len(res.Targets))
	for q := range res.Targets {
		targets = append(targets, q)
	}
	sort.Strings(targets)
	for i, q := range targets {
		sep := ", "
		if i == 0 {
			sep = ": "
		}
		fmt.Fprintf(w, "%s%d to %s", sep, res.Targets[q], q)
	}
	fmt.Fprintln(w)
	if res.Unmatched > 0 {
		fmt.Fprintf(w, "  %d message(s) did not match the filter and stay in %s\n", res.Unmatched, res.From)
	}
	for _, s := range res.Skipped {
		fmt.Fprintf(w, "  left in %s: message %s: %s\n", printable(res.From), printable(orNone(s.MessageId)), printable(oneLine(s.Err.Error())))
	}
	if res.Duplicates > 0 {
		fmt.Fprintf(w, "  %d message(s) are now in their target and still in %s (ack lost after the republish)\n", res.Duplicates, res.From)
	}
}

type purgeCmd struct {
	Queue string `arg:"" help:"Queue to empty."`
	Yes   bool   `short:"y" help:"Do not ask for confirmation."`
}

// Validate refuses an empty queue name before the broker is dialled.
func (c *purgeCmd) Validate() error { return named(c.Queue) }

func (c *purgeCmd) Run(e *env) error {
	counts, err := ops.Count(e.ctx, e.b, c.Queue)
	if err != nil {
		return err
	}
	if !counts[0].Exists {
		return missingQueue(c.Queue)
	}
	e.result = map[string]any{"queue": c.Queue, "purged": 0}
	if err := e.confirm(c.Yes, fmt.Sprintf("Delete all %d ready message(s) in %s for good?", counts[0].Ready, c.Queue)); err != nil {
		return err
	}
	n, err := ops.Purge(e.ctx, e.b, c.Queue)
	if err != nil {
		return plainNotFound(err, c.Queue)
	}
	e.result = map[string]any{"queue": c.Queue, "purged": n}
	fmt.Fprintf(e.out, "purged %d message(s) from %s\n", n, c.Queue)
	return nil
}

type deleteCmd struct {
	Queue     string `arg:"" help:"Queue holding the message."`
	MessageID string `arg:"" name:"message-id" help:"Message id of the message to delete."`
	Yes       bool   `short:"y" help:"Do not ask for confirmation."`
}

// Validate refuses an empty queue name before the broker is dialled.
func (c *deleteCmd) Validate() error { return named(c.Queue) }

func (c *deleteCmd) Run(e *env) error {
	e.result = map[string]any{"queue": c.Queue, "message_id": c.MessageID, "deleted": 0}
	counts, err := ops.Count(e.ctx, e.b, c.Queue)
	if err != nil {
		return err
	}
	if !counts[0].Exists {
		return missingQueue(c.Queue)
	}
	if err := e.confirm(c.Yes, fmt.Sprintf("Delete message %s from %s for good?", c.MessageID, c.Queue)); err != nil {
		return err
	}
	n, err := ops.Delete(e.ctx, e.b, c.Queue, ops.Filter{MessageId: c.MessageID})
	if errors.Is(err, ops.ErrNoMessage) {
		return fmt.Errorf("no message in %s has id %q", c.Queue, c.MessageID)
	}
	if err != nil {
		return plainNotFound(err, c.Queue)
	}
	e.result = map[string]any{"queue": c.Queue, "message_id": c.MessageID, "deleted": n}
	fmt.Fprintf(e.out, "deleted %d message(s) with id %s from %s\n", n, c.MessageID, c.Queue)
	return nil
}
