// Package check is the field's checker: it reads what the worker processes
// wrote (package history), what the database holds at the end (committed
// orders, the inbox's effects, outbox rows still waiting) and what the
// broker holds at the end (.dlq, .parked, anything still queued), and says
// whether the invariants of issue 30 held:
//
//   - lost: a plain publish the broker confirmed that did not reach the end
//     its script names (handled, .dlq or .parked), or a committed order
//     with no effect, and that is not still waiting anywhere;
//   - duplicate_effects: an order whose effect (written in the inbox's
//     transaction) exists more than once, or an order that was never
//     committed (rolled back) and has an effect at all;
//   - reordered: an effect, per ordering key, whose sequence number is below
//     one already in effect for that key (the outbox promises per-key order
//     and the inbox consumer runs in order);
//   - stuck: a message still queued, or an outbox row still unpublished,
//     when the quiescence bound after the last heal ran out.
//
// Check returns the counts (Result.Line is the one FIELD line) and each
// violation with the part of the history that shows it. It reads no file,
// broker or database itself: the orchestrator collects the Input, and
// Check is a function of it alone.
package check
