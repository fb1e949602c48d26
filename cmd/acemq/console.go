package main

import (
	"fmt"

	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/ops"
)

// consoleCmd is `acemq console`: the dead-letter web console (ops.Console)
// served until interrupted.
type consoleCmd struct {
	Queues     []string `arg:"" optional:"" name:"queue" help:"Source queues to watch (their .dlq and .parked are shown)."`
	Listen     string   `default:"127.0.0.1:8089" help:"Address to serve on. Not loopback only with --token."`
	Management string   `placeholder:"http://USER:PASS@HOST:15672" env:"ACEMQ_MANAGEMENT_URL" help:"RabbitMQ management API: watch every queue with a .dlq or .parked in --vhost too."`
	Vhost      string   `default:"/" help:"Virtual host asked of the management API."`
	Token      string   `env:"ACEMQ_CONSOLE_TOKEN" help:"Access token (default: $ACEMQ_CONSOLE_TOKEN); open the page once with ?token=... ."`
	ReadOnly   bool     `help:"Show only: no replay, delete or purge."`
}

// Validate refuses, before the broker is dialled, what Listen would
// refuse: a non-loopback address without a token, no queue to watch, or
// an empty queue name.
func (c *consoleCmd) Validate() error {
	if c.Token == "" && !ops.LoopbackAddr(c.Listen) {
		return fmt.Errorf("--listen %s is not a loopback address: give --token (or $ACEMQ_CONSOLE_TOKEN) to serve it there", c.Listen)
	}
	if len(c.Queues) == 0 && c.Management == "" {
		return fmt.Errorf("name the queues to watch, or give --management")
	}
	return named(c.Queues...)
}

func (c *consoleCmd) Run(e *env) error {
	con, err := ops.NewConsole(e.b, ops.ConsoleOptions{
		Queues: c.Queues, Management: c.Management, Vhost: c.Vhost,
		Token: c.Token, ReadOnly: c.ReadOnly, Logger: e.actions,
	})
	if err != nil {
		return err
	}
	ln, err := con.Listen(c.Listen)
	if err != nil {
		_ = con.Close(e.ctx)
		return err
	}
	attrs := []any{"url", "http://" + ln.Addr().String() + "/", "read_only", c.ReadOnly}
	if c.Management != "" {
		attrs = append(attrs, "management", mq.Redact(c.Management))
	}
	if c.Token != "" {
		attrs = append(attrs, "token", "required: open the url with ?token=...")
	}
	e.actions.Info("acemq.console.serving", attrs...)
	fmt.Fprintf(e.out, "console on http://%s/ (Ctrl-C to stop)\n", ln.Addr())
	return con.Serve(e.ctx, ln)
}
