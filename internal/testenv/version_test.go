package testenv

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func TestParseVersion(t *testing.T) {
	for in, want := range map[string]Version{
		"3.10.8":       {3, 10, 8},
		"4.3.6":        {4, 3, 6},
		"4.0":          {4, 0, 0},
		"4.1.0+rc.1":   {4, 1, 0},
		"4.2.0-beta.3": {4, 2, 0},
	} {
		got, err := ParseVersion(in)
		if err != nil || got != want {
			t.Errorf("ParseVersion(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "4", "x.y", "4.x"} {
		if v, err := ParseVersion(in); err == nil {
			t.Errorf("ParseVersion(%q) = %v, want an error", in, v)
		}
	}
	v := Version{4, 0, 5}
	if !v.AtLeast(4, 0) || !v.AtLeast(3, 10) || v.AtLeast(4, 3) || v.String() != "4.0.5" {
		t.Errorf("Version %v: AtLeast or String wrong", v)
	}
}

func TestCtlArgs(t *testing.T) {
	root := os.Geteuid() == 0
	t.Setenv("RABBITMQCTL", "")
	if got, want := ctlArgs("", []string{"status"}), append(unwrapped([]string{"rabbitmqctl"}, root), "-q", "status"); !reflect.DeepEqual(got, want) {
		t.Errorf("default: %q, want %q", got, want)
	}
	t.Setenv("RABBITMQCTL", "chroot /b/sid rabbitmqctl -n rabbit43@localhost")
	if got, want := ctlArgs("", []string{"status"}), []string{"chroot", "/b/sid", "rabbitmqctl", "-n", "rabbit43@localhost", "-q", "status"}; !reflect.DeepEqual(got, want) {
		t.Errorf("suite's node: %q, want %q", got, want)
	}
	if got, want := ctlArgs("c1@localhost", []string{"status"}), []string{"chroot", "/b/sid", "rabbitmqctl", "-q", "-n", "c1@localhost", "status"}; !reflect.DeepEqual(got, want) {
		t.Errorf("another node: %q, want %q", got, want)
	}
}

// As root, the wrapper gives way to the CLI itself where the installation
// has it; otherwise the command is left as it is.
func TestUnwrapped(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Dir(dir+cliPath), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir+cliPath, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	in := []string{"chroot", dir, "rabbitmqctl", "-n", "rabbit43@localhost"}
	want := []string{"chroot", dir, "env", "HOME=/var/lib/rabbitmq", cliPath, "-n", "rabbit43@localhost"}
	if got := unwrapped(in, true); !reflect.DeepEqual(got, want) {
		t.Errorf("root, CLI present: %q, want %q", got, want)
	}
	if got := unwrapped(in, false); !reflect.DeepEqual(got, in) {
		t.Errorf("not root: %q, want it unchanged", got)
	}
	absent := []string{"chroot", t.TempDir(), "rabbitmqctl"}
	if got := unwrapped(absent, true); !reflect.DeepEqual(got, absent) {
		t.Errorf("root, no CLI in the installation: %q, want it unchanged", got)
	}
	other := []string{"/opt/rabbitmq/sbin/rabbitmqctl"}
	if got := unwrapped(other, true); !reflect.DeepEqual(got, other) {
		t.Errorf("a CLI named by path: %q, want it unchanged", got)
	}
}
