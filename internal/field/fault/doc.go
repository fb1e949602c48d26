// Package fault is the field's fault schedule (issue 30; the interface is
// fixed in FIELD.md at the repository's worktree root of the session): a
// list of faults generated from a seed, and its execution against the
// three-node cluster of scripts/field.sh.
//
// Generate draws the schedule from a generator of the package's own
// (splitmix64), so a seed replays the same schedule on every machine and Go
// release. Network faults (partition, partition-oneway, isolate-clients)
// never overlap each other, nor do two slow links, two node faults (kill,
// restart, rolling) or two PostgreSQL faults: field.sh's heal and
// netem-clear remove every cut or slow link at once, and two nodes down at
// once leave no majority to restart into. Faults of different kinds overlap
// on purpose: every schedule of two faults or more has at least one overlap,
// and every schedule of two minutes or more has at least one partition.
//
// Run executes a schedule through the script, hands the process faults
// (kill-relay, kill-consumer, conn-cut) to the orchestrator's Procs, checks
// `field.sh cut-ok` while a cut lasts (re-applying a cut that vanished), and
// heals everything after the last fault.
package fault
