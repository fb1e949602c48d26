package main

import (
	"strings"
	"testing"
)

// The console refuses a non-loopback address without a token before it
// dials the broker, and wants something to watch.
func TestConsoleRefusals(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"console", "--listen", "0.0.0.0:8089", "orders"}, "not a loopback address"},
		{[]string{"console", "--listen", "192.168.1.10:8089", "orders"}, "not a loopback address"},
		{[]string{"console", "--listen", ":8089", "orders"}, "not a loopback address"},
		{[]string{"console"}, "name the queues to watch"},
	} {
		t.Setenv("ACEMQ_CONSOLE_TOKEN", "")
		code, _, errs := runCLI(t, tc.args...)
		if code != exitUsage || !strings.Contains(errs, tc.want) {
			t.Errorf("%q: exit %d, stderr %q; want %d and %q", tc.args, code, errs, exitUsage, tc.want)
		}
	}
}

func TestConsoleHelp(t *testing.T) {
	code, out, _ := runCLI(t, "console", "--help")
	for _, want := range []string{"--listen", "127.0.0.1:8089", "--management", "--token", "--read-only"} {
		if code != exitOK || !strings.Contains(out, want) {
			t.Errorf("console --help: exit %d, lacks %q:\n%s", code, want, out)
		}
	}
}
