// Command fieldworker is one process of the field's workload (issue 30,
// `make field`): the orchestrator (internal/cmd/field) starts several, kills
// some with SIGKILL and starts them again, and reads what each appended to
// its history file (package history). Its role:
//
//	writer     commits orders through the outbox (one transaction: the
//	           order row and its outbox row), a tenth rolled back on purpose,
//	           over workload.Keys ordering keys with a sequence number each
//	relay      an outbox relay (two run on one table)
//	publisher  a plain mq.Publisher of scripted messages to the work queue
//	worker     the work queue through middleware.Standard: the handler fails
//	           a message's first attempts as its script says (in-process
//	           waits, a broker rung, .dlq when exhausted) or parks it
//	inbox      the orders through the inbox, in order: one effect row per
//	           order, in the inbox's transaction
//
// Environment: FIELD_ROLE, FIELD_PROC (its name in the history), FIELD_URLS
// (comma-separated, every node), FIELD_PG, FIELD_PREFIX, FIELD_TABLES,
// FIELD_HISTORY (the file it appends to), FIELD_RATE (per second, writer
// and publisher), FIELD_STATS (how often a stats line is written, default
// 5s), FIELD_AMQP_PORTS (the ports its broker connections go to, for the
// stats). SIGTERM stops it gracefully.
package main
