// Package workload is what the field's processes share: the names of its
// queues and tables, its topology and retry policies, the script a plain
// message carries, and the one place the field calls the library's
// public API to build brokers, publishers and consumers (so a change of
// that API touches this file, not the worker and the orchestrator). It
// runs no fault and judges nothing (packages fault and check).
package workload
