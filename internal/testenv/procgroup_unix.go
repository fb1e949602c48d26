//go:build unix

package testenv

import (
	"os/exec"
	"syscall"
)

// ownGroup runs cmd in a process group of its own and has its context's
// end kill the whole group: RabbitMQ's CLI script starts the CLI's VM as a
// child rather than exec'ing it, so a kill of the script alone would leave
// the VM running.
func ownGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
}
