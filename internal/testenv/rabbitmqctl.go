package testenv

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"time"
)

// CtlTimeout bounds one Rabbitmqctl call when ctx has no earlier deadline.
const CtlTimeout = 90 * time.Second

// Rabbitmqctl runs `rabbitmqctl -q [-n node] args...` and returns its
// output (stdout and stderr together). node "" is the CLI's default node
// (the shared broker). The call ends at ctx's end or after CtlTimeout,
// whichever comes first; a non-zero exit is an error that carries the
// output.
func Rabbitmqctl(ctx context.Context, node string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, CtlTimeout)
	defer cancel()
	full := []string{"-q"}
	if node != "" {
		full = append(full, "-n", node)
	}
	full = append(full, args...)
	cmd := exec.CommandContext(ctx, "rabbitmqctl", full...)
	cmd.WaitDelay = 5 * time.Second // the Debian wrapper forks su; don't wait on its pipes forever
	out, err := cmd.CombinedOutput()
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%v)", ctx.Err(), err)
		}
		return string(out), fmt.Errorf("rabbitmqctl %s: %w: %s", strings.Join(full, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}
