// Command benchreport measures AceMQ for Go against raw amqp091-go on the
// same broker, in the same run, and prints the performance table of
// docs/performance.md: for every contestant its throughput, the ratio to
// the raw baseline of its group, the client's CPU time per message (this
// process, from getrusage), the broker's CPU time per message (the
// beam.smp process, from /proc/<pid>/stat) and the client's heap
// allocations per message. `make bench` runs it, on the machine's broker
// and on RabbitMQ 4.3 (RABBITMQCTL, as scripts/broker.sh env prints it,
// finds the broker's process). Consuming and publishing are measured on
// classic and (-quorum, default on) quorum queues.
//
// Rounds alternate the contestants of a group, the one going first
// rotating round by round, so drift on a busy machine hits all alike; every
// figure is the median over -rounds rounds, and a ratio is the median of
// the per-round ratios (each contestant against the baseline's round next
// to it). On a shared machine msgs/s follows whatever else runs there; CPU
// time per message hardly does: read that first.
package main
