package retry_test

import (
	"testing"

	"github.com/acemq/acemq-go/internal/conformance"
)

// conformance/policies.json run against this package: schedules, broker
// rungs, the in-process limit (inclusive) and "after attempt k".
func TestConformancePolicies(t *testing.T) {
	var v conformance.Policies
	if err := conformance.Load("policies.json", &v); err != nil {
		t.Fatal(err)
	}
	for _, f := range conformance.CheckPolicies(v) {
		t.Error(f)
	}
}
