// Command outboxbench measures the outbox and the inbox (issue 23) against
// baselines taken in the same run, on the local PostgreSQL and broker:
//
//   - tx cost: a transaction that writes an order and publishes its event
//     through the outbox, against one that writes the order and a plain
//     insert of the same row into a table without the outbox's index and
//     notify (and the statement alone); then transactions per second with
//     8 concurrent writers, the default (no NOTIFY) and WithNotify, against
//     plain ones (target: the default at least 0.9x): twice the rounds
//     of the other measures, the default and the plain writers one right
//     after the other and taking turns to go first, the notifying ones
//     last, and each ratio the median of the rounds' own ratios;
//   - relay throughput: rows already committed, drained by one relay,
//     against the same number of messages published directly through one
//     mq.Publisher by as many goroutines as the relay's batch (target at
//     least 0.9x), the two taking turns to go first after the rows are
//     written, with the CPU per message of each side for this process,
//     the broker (every beam.smp process of the machine) and PostgreSQL
//     (every postgres process), read from /proc: the three share the
//     machine's cores, so what the relay costs PostgreSQL slows the
//     broker too; each ratio is the median of the rounds' own ratios,
//     each of them printed; each side ends at its last confirm
//     (the relay's: the count of its published messages reaching the
//     round's, told by its counter as it counts), after a warm-up round
//     of each that is not counted;
//   - commit to delivery: a row committed while the relay is idle (10 to
//     50 ms after the last), until a consumer has it, in the default
//     configuration: no NOTIFY, the relay's probe finds it (p50 and p99;
//     target p50 < 10 ms); it bounds commit-to-publish from above;
//   - inbox overhead: a delivery through the Inbox (begin, record, commit)
//     against the bare handler.
//
// Rounds alternate between a measure and its baseline; the median is
// printed. The last line sums up the default configuration:
//
//	OUTBOX writers8=<ratio> relay=<ratio> p50_ms=<ms>
//
// (printed only when all three were measured, i.e. without -only). `make
// bench` runs it; everything it creates is named goit_* / goit.* and
// removed.
package main
