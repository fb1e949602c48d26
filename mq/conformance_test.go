package mq_test

import (
	"testing"

	"github.com/acemq/acemq-go/internal/conformance"
	"github.com/acemq/acemq-go/mq"
)

// conformance/attempt.json: x-acemq-attempt in every AMQP type a peer may
// write, and the attempt AttemptOf reads from it.
func TestConformanceAttempt(t *testing.T) {
	var v conformance.Attempts
	if err := conformance.Load("attempt.json", &v); err != nil {
		t.Fatal(err)
	}
	if v.Header != mq.HeaderAttempt {
		t.Errorf("attempt.json is about %q, mq.HeaderAttempt is %q", v.Header, mq.HeaderAttempt)
	}
	for _, f := range conformance.CheckAttempts(v, mq.AttemptOf) {
		t.Error(f)
	}
}
