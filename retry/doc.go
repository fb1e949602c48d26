// Package retry is the retry policy of the AceMQ contract as pure values:
// how many deliveries a message gets, how long to wait between them, which of
// those waits the consumer waits in its own process and which ones it hands
// to the broker's delay queues ("rungs").
//
// What this package owns: the schedule arithmetic of docs/contract.md,
// "Retry policy", and the validation that keeps a policy expressible on the
// broker (broker waits are whole seconds). What it must not touch: names,
// queues, headers or any I/O. The topology package turns a policy's broker
// rungs into queues; the middleware package runs a policy against
// deliveries. Both read the rungs from the one Policy value, never from a
// second list.
package retry
