package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/alecthomas/kong"
	"github.com/lmittmann/tint"
	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/ops"
)

// The exit codes (see the package documentation).
const (
	exitOK          = 0
	exitFailed      = 1
	exitLeftBehind  = 2
	exitNoBroker    = 3
	exitUsage       = 80 // kong's code for a usage error
	exitInterrupted = 130
)

// defaultURL is the local broker, used when neither --url nor AMQP_URL is
// given.
const defaultURL = "amqp://guest:guest@127.0.0.1:5672/"

// progressAbove is the replay size from which a progress bar is shown.
const progressAbove = 100

type cli struct {
	URL     string        `help:"Broker URL (default: $AMQP_URL, else the local broker as guest)." env:"AMQP_URL" placeholder:"amqp://USER:PASS@HOST:5672/VHOST"`
	Timeout time.Duration `help:"How long to wait for the broker to answer." default:"10s"`
	Verbose bool          `short:"v" help:"Log debug detail."`

	Count  countCmd  `cmd:"" help:"Show how many messages are ready in each queue, and its consumers."`
	Peek   peekCmd   `cmd:"" help:"Show messages at the head of a queue without taking them."`
	Replay replayCmd `cmd:"" help:"Move messages from a .dlq or .parked queue back to the queue they failed on."`

	Console consoleCmd `cmd:"" help:"Serve the dead-letter web console (loopback by default)."`
}

// env is what every command runs with.
type env struct {
	ctx    context.Context
	b      *mq.Broker
	out    io.Writer
	stderr io.Writer
	log    *slog.Logger
	tty    bool // stderr is a terminal
}

// kongExit carries kong's exit code out of Parse (for --help) without
// ending the process, so run stays testable.
type kongExit int

func run(ctx context.Context, args []string, stdout, stderr io.Writer) (code int) {
	var c cli
	parser, err := kong.New(&c,
		kong.Name("acemq"),
		kong.Description("AceMQ operator tool: count, peek at and replay RabbitMQ queues."),
		kong.Writers(stdout, stderr),
		kong.ShortUsageOnError(),
		kong.Exit(func(code int) { panic(kongExit(code)) }),
	)
	if err != nil {
		fmt.Fprintf(stderr, "acemq: %v\n", err)
		return exitFailed
	}
	defer func() {
		if r := recover(); r != nil {
			e, ok := r.(kongExit)
			if !ok {
				panic(r)
			}
			code = int(e)
		}
	}()
	kctx, err := parser.Parse(args)
	parser.FatalIfErrorf(err) // exits (through kongExit) with kong's usage code

	tty := isTerminal(stderr)
	level := slog.LevelInfo
	if c.Verbose {
		level = slog.LevelDebug
	}
	log := slog.New(tint.NewTextHandler(stderr, &tint.Options{Level: level, TimeFormat: time.TimeOnly, NoColor: !tty}))

	url := c.URL
	if url == "" {
		url = defaultURL
	}
	b := mq.New(mq.Config{URLs: []string{url}, ConnectionName: "acemq-cli", Logger: log})
	cctx, cancel := context.WithTimeout(ctx, c.Timeout)
	err = b.Start(cctx)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return exitInterrupted
		}
		log.Error("acemq.cli.connect.failed", "url", mq.Redact(url), "error", err)
		return exitNoBroker
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = b.Close(cctx)
	}()

	err = kctx.Run(&env{ctx: ctx, b: b, out: stdout, stderr: stderr, log: log, tty: tty})
	switch {
	case err == nil:
		return exitOK
	case ctx.Err() != nil && errors.Is(err, context.Canceled):
		log.Warn("acemq.cli.interrupted", "error", err)
		return exitInterrupted
	case errors.Is(err, errLeftBehind):
		log.Warn("acemq.cli.left.behind", "error", err)
		return exitLeftBehind
	default:
		log.Error("acemq.cli.failed", "command", kctx.Command(), "error", err)
		return exitFailed
	}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

var errLeftBehind = errors.New("messages left behind")

type countCmd struct {
	Queues []string `arg:"" name:"queue" help:"Queues to count."`
}

func (c *countCmd) Run(e *env) error {
	counts, err := ops.Count(e.ctx, e.b, c.Queues...)
	tw := tabwriter.NewWriter(e.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "QUEUE\tREADY\tCONSUMERS")
	var missing []string
	for _, qc := range counts {
		if !qc.Exists {
			missing = append(missing, qc.Queue)
			fmt.Fprintf(tw, "%s\t-\t(does not exist)\n", qc.Queue)
			continue
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\n", qc.Queue, qc.Ready, qc.Consumers)
	}
	_ = tw.Flush()
	if err != nil {
		return err
	}
	if len(missing) > 0 {
		return fmt.Errorf("no such queue: %s: %w", strings.Join(missing, ", "), mq.ErrNotFound)
	}
	return nil
}

type peekCmd struct {
	Queue string `arg:"" help:"Queue to peek at."`
	N     int    `short:"n" default:"10" help:"How many messages to show, from the head."`
}

// contractHeaders are shown by name; the others are listed after them.
var contractHeaders = map[string]bool{
	mq.HeaderAttempt: true, mq.HeaderReason: true, mq.HeaderError: true, mq.HeaderFailedAt: true,
	mq.HeaderSourceQueue: true, mq.HeaderReplayedAt: true, mq.HeaderReplayedFrom: true,
}

func (c *peekCmd) Run(e *env) error {
	msgs, err := ops.Peek(e.ctx, e.b, c.Queue, c.N)
	for _, m := range msgs {
		printPeeked(e.out, m)
	}
	if err != nil {
		return err
	}
	if len(msgs) == 0 {
		fmt.Fprintf(e.out, "%s is empty\n", c.Queue)
	} else {
		fmt.Fprintf(e.out, "%d message(s) shown from the head of %s; all left in place\n", len(msgs), c.Queue)
	}
	return nil
}

func printPeeked(w io.Writer, m ops.Peeked) {
	fmt.Fprintf(w, "#%d  message-id=%s", m.Position, orNone(m.MessageID))
	if m.ContentType != "" {
		fmt.Fprintf(w, "  content-type=%s", m.ContentType)
	}
	if !m.Timestamp.IsZero() {
		fmt.Fprintf(w, "  timestamp=%s", m.Timestamp.UTC().Format(time.RFC3339))
	}
	fmt.Fprintf(w, "  redelivered=%t\n", m.Redelivered)
	row := func(k, v string) { fmt.Fprintf(w, "    %-14s %s\n", k+":", v) }
	row("attempt", fmt.Sprint(m.Attempt))
	if m.SourceQueue != "" {
		row("source-queue", m.SourceQueue)
	}
	if m.Reason != "" {
		row("reason", m.Reason)
	}
	if m.Error != "" {
		row("error", ops.Preview([]byte(m.Error), 512))
	}
	if !m.FailedAt.IsZero() {
		row("failed-at", m.FailedAt.UTC().Format(time.RFC3339))
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
	Limit  int    `help:"Move at most this many messages (default: all that are there when the replay starts)."`
	DryRun bool   `help:"Show where the messages would go; move nothing."`
}

func (c *replayCmd) Run(e *env) error {
	var bar *progressbar.ProgressBar
	opts := ops.ReplayOptions{To: c.To, Limit: c.Limit, DryRun: c.DryRun, Logger: e.log}
	opts.Progress = func(done, total int) {
		if bar == nil && total > progressAbove && e.tty {
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
	res, err := ops.Replay(e.ctx, e.b, c.From, opts)
	if bar != nil {
		if err == nil {
			_ = bar.Finish()
		} else {
			_ = bar.Exit()
		}
		fmt.Fprintln(e.stderr)
	}
	printReplay(e.out, res)
	if err != nil {
		return err
	}
	if len(res.Skipped) > 0 {
		return fmt.Errorf("%d message(s) left in %s: their source queue is unknown (give --to): %w", len(res.Skipped), c.From, errLeftBehind)
	}
	return nil
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
	for _, s := range res.Skipped {
		fmt.Fprintf(w, "  left in %s: message %s: %v\n", res.From, orNone(s.MessageID), s.Err)
	}
	if res.Duplicates > 0 {
		fmt.Fprintf(w, "  %d message(s) are now in their target and still in %s (ack lost after the republish)\n", res.Duplicates, res.From)
	}
}
