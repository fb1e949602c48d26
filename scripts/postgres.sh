#!/usr/bin/env bash
# Makes sure the machine's PostgreSQL 15 answers on 127.0.0.1:5432 and has a
# database `test` (the outbox suites, issue 23): starts the Debian cluster
# 15/main when it does not answer. Never stops or restarts it; the tests that
# kill PostgreSQL run a cluster of their own.
set -euo pipefail
ready() { pg_isready -q -h 127.0.0.1 -p 5432; }
if ! ready; then
	echo "starting PostgreSQL 15/main"
	pg_ctlcluster --skip-systemctl-redirect 15 main start
	for _ in $(seq 100); do ready && break; sleep 0.2; done
fi
ready || { echo "PostgreSQL does not answer on 127.0.0.1:5432" >&2; exit 1; }
if ! psql -h 127.0.0.1 -U postgres -d postgres -tAc "SELECT 1 FROM pg_database WHERE datname = 'test'" | grep -q 1; then
	psql -h 127.0.0.1 -U postgres -d postgres -qc "CREATE DATABASE test"
fi
