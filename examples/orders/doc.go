// Command orders is the AceMQ demo service: an fx app that declares an
// orders-events topic exchange and two consuming queues with dead letters
// and a retry ladder, publishes a handful of orders, and shows — in readable
// logs and a trace summary — messages succeeding, retrying in-process,
// retrying through a broker rung, being parked and being dead-lettered.
// It exits by itself once every order has reached its end (well within a
// minute) and deletes everything it declared; interrupted (Ctrl-C,
// SIGTERM), it stops and deletes it too, exiting 130 (a second Ctrl-C
// exits at once, leaving what is left).
//
//	make demo            # or: go run ./examples/orders
//
// Every name it declares is under a prefix, so that on a shared broker it
// cannot be a service's: DEMO_PREFIX, or else acemq-demo-<random>. drawn
// per run. It runs only if none of its queues and its exchange exists yet,
// so what it deletes is what it created; it declares but never deletes
// the library's shared acemq.dlx and acemq.retry.
//
// AMQP_URL picks the broker (default amqp://guest:guest@127.0.0.1:5672/).
// DEMO_NO_COLOR=1 turns colours off.
package main
