// Package history is the field's record of what its worker processes did:
// each process appends JSON lines to a file of its own (one Record a line),
// and the checker reads every file of a run's folder back. A line is written
// with one write(2) on a file opened O_APPEND, so a process killed with
// SIGKILL leaves whole lines behind (the kernel keeps what was written); a
// torn last line, should one appear, is skipped by Read. It knows the
// record and its files only, nothing of the workload or the checker.
package history
