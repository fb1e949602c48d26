package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// CtlTimeout bounds one Rabbitmqctl call when ctx has no earlier deadline.
const CtlTimeout = 90 * time.Second

// ctlCommand is the rabbitmqctl command line the tests run, split into
// words: RABBITMQCTL's words when it is set (scripts/broker.sh env prints
// it, e.g. `chroot /var/cache/acemq/brokers/sid rabbitmqctl -n
// rabbit43@localhost`), else plain `rabbitmqctl` (the machine's broker).
func ctlCommand() []string {
	f := strings.Fields(os.Getenv("RABBITMQCTL"))
	if len(f) == 0 {
		f = []string{"rabbitmqctl"}
	}
	return unwrapped(f, os.Geteuid() == 0)
}

// cliPath is where Debian's RabbitMQ keeps the CLI itself; /usr/sbin's
// rabbitmqctl is a wrapper around it.
const cliPath = "/usr/lib/rabbitmq/bin/rabbitmqctl"

// unwrapped is the command f with the Debian wrapper (a bare
// `rabbitmqctl`, after `chroot DIR` or alone) replaced by the CLI itself
// when root runs it and the installation has it: as root the wrapper runs
// the CLI through su, in a session of its own, so the kill that ends a
// call cut off by its context reaches only the wrapper, and the CLI's VM
// lives on holding one of the eleven ports every CLI of that RabbitMQ may
// listen on (with all eleven taken, no rabbitmqctl starts). HOME is the
// rabbitmq user's, for the nodes' cookie.
func unwrapped(f []string, root bool) []string {
	dir, i := "", 0
	if len(f) > 2 && f[0] == "chroot" {
		dir, i = f[1], 2
	}
	if !root || f[i] != "rabbitmqctl" {
		return f
	}
	if _, err := os.Stat(dir + cliPath); err != nil {
		return f
	}
	out := append([]string{}, f[:i]...)
	out = append(out, "env", "HOME=/var/lib/rabbitmq", cliPath)
	return append(out, f[i+1:]...)
}

// ctlArgs builds the full command for node (node "" is ctlCommand's own
// node): a -n in ctlCommand names the suite's broker, so a call for another
// node (a cluster or TLS node started beside it, in the same installation)
// replaces it rather than adding a second one.
func ctlArgs(node string, args []string) []string {
	base := ctlCommand()
	full := make([]string, 0, len(base)+len(args)+3)
	for i := 0; i < len(base); i++ {
		if node != "" && (base[i] == "-n" || base[i] == "--node") && i+1 < len(base) {
			i++
			continue
		}
		full = append(full, base[i])
	}
	full = append(full, "-q")
	if node != "" {
		full = append(full, "-n", node)
	}
	return append(full, args...)
}

// Rabbitmqctl runs `rabbitmqctl -q [-n node] args...` through ctlCommand
// and returns its output (stdout and stderr together). node "" is
// ctlCommand's node (the suite's broker). The call ends at ctx's end or
// after CtlTimeout, whichever comes first; a non-zero exit is an error that
// carries the output.
func Rabbitmqctl(ctx context.Context, node string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, CtlTimeout)
	defer cancel()
	full := ctlArgs(node, args)
	cmd := exec.CommandContext(ctx, full[0], full[1:]...)
	ownGroup(cmd)
	cmd.WaitDelay = 5 * time.Second // a CLI that outlives the kill (the wrapper's, not root) holds the pipes
	out, err := cmd.CombinedOutput()
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%v)", ctx.Err(), err)
		}
		return string(out), fmt.Errorf("%s: %w: %s", strings.Join(full, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// KillCLIs kills every RabbitMQ CLI VM (rabbitmqctl's escript) whose
// command line holds marker, and returns their pids: what a test that
// cuts a call off finds left behind.
func KillCLIs(marker string) []int {
	var left []int
	out, _ := exec.Command("pgrep", "-f", "escript/rabbitmqctl").Output()
	for _, f := range strings.Fields(string(out)) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err == nil && strings.Contains(string(cmdline), marker) {
			left = append(left, pid)
			if p, err := os.FindProcess(pid); err == nil {
				_ = p.Kill()
			}
		}
	}
	return left
}
