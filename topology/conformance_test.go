package topology_test

import (
	"testing"

	"github.com/acemq/acemq-go/internal/conformance"
)

// The contract as data: conformance/names.json, topologies.json and
// validation.json, run against this package. A vector Go fails is a
// failing test; the README in conformance/ tells another library how to
// run the same files.

func TestConformanceNames(t *testing.T) {
	var v conformance.Names
	if err := conformance.Load("names.json", &v); err != nil {
		t.Fatal(err)
	}
	for _, f := range conformance.CheckNames(v) {
		t.Error(f)
	}
}

func TestConformanceTopologies(t *testing.T) {
	var v conformance.Topologies
	if err := conformance.Load("topologies.json", &v); err != nil {
		t.Fatal(err)
	}
	for _, f := range conformance.CheckTopologies(v) {
		t.Error(f)
	}
}

func TestConformanceValidation(t *testing.T) {
	var v conformance.Validation
	if err := conformance.Load("validation.json", &v); err != nil {
		t.Fatal(err)
	}
	for _, f := range conformance.CheckValidation(v) {
		t.Error(f)
	}
}

func TestConformanceDurableRungs(t *testing.T) {
	var v conformance.DurableRungs
	if err := conformance.Load("durable_rungs.json", &v); err != nil {
		t.Fatal(err)
	}
	for _, f := range conformance.CheckDurableRungs(v) {
		t.Error(f)
	}
}
