package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
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
	if f := strings.Fields(os.Getenv("RABBITMQCTL")); len(f) > 0 {
		return f
	}
	return []string{"rabbitmqctl"}
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
	cmd.WaitDelay = 5 * time.Second // the Debian wrapper forks su; don't wait on its pipes forever
	out, err := cmd.CombinedOutput()
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%v)", ctx.Err(), err)
		}
		return string(out), fmt.Errorf("%s: %w: %s", strings.Join(full, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}
