package otelmq_test

import (
	"testing"

	"go.uber.org/goleak"
)

// otelmq starts no goroutines; the tests shut down every provider they
// start.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
