// Command orders is the AceMQ demo service: an fx app that declares an
// orders-events topic exchange and two consuming queues with dead letters
// and a retry ladder, publishes a handful of orders, and shows — in readable
// logs and a trace summary — messages succeeding, retrying in-process,
// retrying through a broker rung, being parked and being dead-lettered.
// It exits by itself once every order has reached its end (well within a
// minute) and deletes everything it declared.
//
//	make demo            # or: go run ./examples/orders
//
// AMQP_URL picks the broker (default amqp://guest:guest@127.0.0.1:5672/).
// DEMO_NO_COLOR=1 turns colours off; DEMO_PREFIX prefixes every name.
package main
