package testenv

import (
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
	t.Setenv("RABBITMQCTL", "")
	if got, want := ctlArgs("", []string{"status"}), []string{"rabbitmqctl", "-q", "status"}; !reflect.DeepEqual(got, want) {
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
