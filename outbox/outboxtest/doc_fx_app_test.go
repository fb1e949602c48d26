//go:build integration

package outboxtest_test

// The app TestBillingConsumer (doc_fx_test.go) tests, as the docs' fx
// section writes one.

import (
	"time"

	"github.com/acemq/acemq-go/fxmodule"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/outbox"
	"github.com/acemq/acemq-go/retry"
	"github.com/acemq/acemq-go/topology"
)

// tables names the app's outbox and inbox tables, once.
var tables = outbox.Schema{Outbox: "billing_outbox", Inbox: "billing_inbox"}

func billingTopology() *topology.Topology {
	return topology.New().Queue("billing.orders", topology.DeadLetter(), topology.Retry(retry.Exponential(6, time.Second)))
}

// billingConsumer is the app's consumer: bill in the inbox outbox.Module
// provides, inside Standard's ladder.
func billingConsumer() fxmodule.Consumer {
	return fxmodule.Consumer{Queue: "billing.orders", Handler: mq.HandlerFunc(bill), Standard: true, Inbox: true}
}
