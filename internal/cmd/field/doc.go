// Command field is the orchestrator of `make field` and `make soak`
// (issue 30): it starts the field's worker processes (internal/cmd/
// fieldworker) against a three-node RabbitMQ cluster and a PostgreSQL,
// runs a fault schedule generated from SEED (by the generator's version
// SCHEDULE_VERSION, the newest by default) while they work, heals, lets
// the load run on for -settle, stops the producers, waits for quiescence
// within -bound of the last heal, stops everything, collects what the
// broker and the database hold, and runs the checker (internal/field/
// check). It prints the seed first and the one FIELD line last, and exits 1
// with the seed and the failing history on any violation.
//
// -mode field runs on scripts/field.sh's cluster with its faults
// (internal/field/fault); -mode cluster on scripts/cluster.sh's nodes
// (c1-c3@localhost) with a drill of its own (process kills, connection
// cuts, a node killed and started), which needs no packet filter.
//
// -soak FILE also samples the broker (ready messages, channels per
// connection) and writes, at the end, a table of the workers' resources
// over time (RSS, goroutines, fds, connections, channels, backlog, consumer
// lag) to FILE; scripts/soakplot.sh turns it into a plot.
package main
