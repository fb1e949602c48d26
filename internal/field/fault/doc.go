// Package fault is the field's fault schedule (issue 30): a list of faults
// generated from a seed, and its execution against the three-node cluster
// of scripts/field.sh. The orchestrator (internal/cmd/field, `make field`)
// prints the schedule, runs it beside the workload and checks the history.
//
// Generate draws the schedule from a generator of the package's own
// (splitmix64), so a seed replays the same schedule on every machine and
// Go release, given the generator's version: a new kind of fault changes
// what every seed draws, so it comes with a new version (Version, the
// newest), and a recorded seed replays with the version it ran with
// (version 1 has no PartitionLeader). Network faults (partition,
// partition-oneway, isolate-clients, partition-leader) never overlap each
// other, nor do two slow links, two node faults (kill, restart, rolling)
// or two PostgreSQL faults: field.sh's heal and netem-clear remove every
// cut or slow link at once, and two nodes down at once leave no majority
// to restart into. Faults of different kinds overlap on purpose: every
// schedule of two faults or more has at least one overlap, and every
// schedule of two minutes or more has at least one partition longer than
// the field's net_ticktime (10 s). A node is never killed or restarted
// while a partition cuts it off alone (nor during a partition-leader,
// whose node is known only when it fires), and a rolling restart never
// overlaps a partition: such a node cannot boot until the heal (Khepri
// has no majority on its side). Slow links are loss and rate only,
// because this machine's kernel has no netem (see scripts/field.sh).
//
// Run executes a schedule through the script, finds the node a
// PartitionLeader cuts when it fires (the one leading the most quorum
// queues, listed within a bound, else the schedule's own), hands the
// process faults (kill-relay, kill-consumer, conn-cut) to the
// orchestrator's Procs, checks `field.sh cut-ok` while a cut lasts
// (re-applying a cut that vanished), and heals everything after the last
// fault. It reaches the cluster only through the script and the
// workload's processes only through Procs.
package fault
