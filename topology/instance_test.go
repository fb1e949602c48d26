package topology

import (
	"strings"
	"testing"
)

func TestInstanceQueueIsStableAndValid(t *testing.T) {
	a, b := InstanceQueue("billing.prices"), InstanceQueue("billing.prices")
	if a != b {
		t.Fatalf("two names in one process: %q, %q", a, b)
	}
	if !strings.HasPrefix(a, "billing.prices.") || len(a) > MaxNameLength || len(a) <= len("billing.prices.") {
		t.Fatalf("InstanceQueue = %q", a)
	}
	if err := New().Queue(a, Exclusive()).Validate(); err != nil {
		t.Fatal(err)
	}
}
