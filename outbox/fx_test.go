package outbox_test

import (
	"strings"
	"testing"

	"go.uber.org/fx"

	"github.com/acemq/acemq-go/outbox"
)

type notASender interface{ Send() }

// AsSender refuses a type an outbox sender cannot be, naming it, when the
// app is built.
func TestAsSenderRefusesOtherTypes(t *testing.T) {
	for name, opt := range map[string]fx.Option{
		"int":        outbox.AsSender[int]("x"),
		"notASender": outbox.AsSender[notASender]("x"),
	} {
		err := fx.New(fx.NopLogger, opt).Err()
		if err == nil || !strings.Contains(err.Error(), "outbox.AsSender") {
			t.Errorf("%s: err = %v, want an outbox.AsSender error", name, err)
		}
	}
}
