// Command service is an AceMQ service as a new user would write one with
// fx: a topic exchange and a consumer under the standard stack whose retry
// policy is written once (in the topology), a typed JSON handler, a
// publisher provided by the module behind an HTTP handler, and /readyz
// from the broker's health check. Its handlers are tested without a broker
// (shipping_test.go): fxmoduletest runs the consumer through the chain the
// module builds, and fakes its publisher as strictly as the broker routes.
//
//	go run ./examples/service      # then:
//	curl -X POST localhost:8080/orders -d '{"id":"o-1","address":"1 Main St","items":2}'
//	curl localhost:8080/readyz
//
// AMQP_URL picks the broker (default amqp://guest:guest@127.0.0.1:5672/),
// LISTEN the HTTP address (default 127.0.0.1:8080), SERVICE_PREFIX a prefix
// for every name. order.shipped is an event: nobody in this service takes
// it, and the publisher to the topic exchange allows that
// (fxmodule.AsPublisher; docs/contract.md, "Events and commands").
package main
