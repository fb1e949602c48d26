// Command service is an AceMQ service as a new user would write one with
// fx: a topic exchange and a consumer under the standard stack whose retry
// policy is written once (in the topology), a typed JSON handler, an
// outbox sender behind an HTTP handler, and /readyz
// from the broker's health check. Its handlers are tested without a broker
// (shipping_test.go): fxmoduletest runs the consumer through the chain the
// module builds, the inbox included (over a PostgreSQL schema of the
// test's own, outboxtest), and fakes its publisher as strictly as the
// broker routes.
//
//	go run ./examples/service      # then:
//	curl -X POST localhost:8080/orders -d '{"id":"o-1","address":"1 Main St","items":2}'
//	curl localhost:8080/readyz
//
// Each order is stored with its order.placed event in one transaction
// (package outbox: the event goes out if and only if the order is stored,
// published by the outbox's relay), and shipped once however often
// order.placed arrives: the consumer runs in the inbox, whose transaction
// records the message with the shipment and the order.shipped event. The
// carrier's booking itself is a call outside the database: the inbox keeps
// a redelivery from booking again, but a crash between the booking and the
// commit books again on the retry (a real carrier takes the order id as an
// idempotency key for that). It needs PostgreSQL: PG_URL (default the
// local one's database test), SERVICE_TABLES a prefix for its tables.
//
// AMQP_URL picks the broker (default amqp://guest:guest@127.0.0.1:5672/),
// LISTEN the HTTP address (default 127.0.0.1:8080), SERVICE_PREFIX a prefix
// for every name. order.shipped is an event: nobody in this service takes
// it, and the relay publishes it to the topology's topic exchange as
// fxmodule.AsPublisher's publisher would, dropped when no queue is bound
// for it (docs/contract.md, "Events and commands").
package main
