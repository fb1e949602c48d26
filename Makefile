# AceMQ for Go. `make demo` runs the demo service against a local broker;
# `make test` runs every unit and integration test with the race detector.
# Both start a local RabbitMQ first if none answers (scripts/broker.sh).
# `make test-all` runs the integration and fault suites on every RabbitMQ
# version the project supports (docs/brokers.md), the unit tests once.

GO        ?= go
AMQP_URL  ?= amqp://guest:guest@127.0.0.1:5672/
export AMQP_URL

# BROKER picks the RabbitMQ version the broker-facing targets run on: empty
# (the default) is the machine's own broker at AMQP_URL, as always; 3.10,
# 4.0 or 4.3 is the node scripts/broker.sh keeps for that version (started
# when it is not running), its AMQP_URL and RABBITMQCTL set for the run.
BROKER    ?=
# BROKERS: the versions `make test-all` and `make suites` run on.
BROKERS   ?= 3.10 4.0 4.3
# The cluster and TLS suites run on nodes of their own from this version's
# installation.
NODES_BROKER ?= 4.3
ifeq ($(BROKER),)
ON_BROKER :=
else
ON_BROKER = eval "$$(./scripts/broker.sh env $(BROKER))" &&
endif

# The repository is several Go modules, joined for development by go.work:
# the core at the root and, so that a service importing the core does not
# get their dependencies, cmd/acemq (kong, progressbar), outbox (pgx),
# examples, integration (chromedp) and internal/cmd in modules of their own
# (scripts/modules.sh; the README's install lines). `./...` stops at a
# module's edge, so the targets below name every module's tree; integration/
# is all behind build tags and is visited by the tagged targets, as are the
# tests of outbox/outboxtest (they need PostgreSQL; so does
# examples/service's, in `unit`). GOWORK is
# set so that a GOWORK=off in the environment cannot hide the nested modules.
export GOWORK := $(CURDIR)/go.work
MODULES := $(patsubst $(CURDIR)%,.%,$(shell GOWORK=$(CURDIR)/go.work $(GO) list -m -f '{{.Dir}}'))
PKGS    := $(addsuffix /...,$(filter-out ./integration,$(MODULES)))

STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2

.PHONY: all test test-all suites unit integration lint vet fmt broker demo chaos cluster-test tls-test fuzz bench chromium pika nft postgres bench-outbox field soak gnuplot

all: lint test

## broker: make sure a local RabbitMQ answers (install and start it if needed;
## BROKER=4.3 or 4.0: the project's node of that version, see scripts/broker.sh)
broker:
	@./scripts/broker.sh up $(or $(BROKER),3.10)

## postgres: make sure the machine's PostgreSQL 15 answers on 127.0.0.1:5432
## with a database test (the outbox suites need it); starts it when it does not
postgres:
	@./scripts/postgres.sh

# The outbox suites (integration, chaos, bench) need PostgreSQL.
integration chaos suites bench: postgres

## bench-outbox: the outbox and the inbox against baselines of the same run
## (tx cost, relay throughput, commit-to-delivery latency, inbox overhead);
## part of `make bench` (OUTBOXBENCHFLAGS passes flags on, e.g. -rounds 7)
bench-outbox: broker postgres
	$(GO) run ./internal/cmd/outboxbench $(OUTBOXBENCHFLAGS)

bench: bench-outbox

## test: unit tests, then integration tests against the local broker, all with -race
test: broker unit integration

## test-all: unit tests once, then integration and chaos on each of BROKERS
## (default 3.10 4.0 4.3), with each version's time
test-all: unit suites

## suites: integration and chaos on each of BROKERS, one version after another
suites: chromium pika
	@set -e; for v in $(BROKERS); do \
		t0=$$(date +%s); \
		echo "== RabbitMQ $$v: integration and chaos"; \
		$(MAKE) --no-print-directory BROKER=$$v integration chaos; \
		echo "== RabbitMQ $$v: integration and chaos passed in $$(( $$(date +%s) - t0 ))s"; \
	done

## unit: every module's tests without a broker, with -race (PostgreSQL
## started: examples/service tests its consumer in the inbox)
unit: postgres
	$(GO) test -race -count=1 $(PKGS)

## integration: the integration suites; the fate matrix (TestFateMatrix) is
## printed at the end, pass or fail
integration: broker chromium pika
	@m=$$(mktemp); trap 'cat "$$m"; rm -f "$$m"' EXIT; \
	$(ON_BROKER) FATE_MATRIX_OUT="$$m" $(GO) test -race -count=1 -tags integration -timeout 20m ./integration/... ./outbox/outboxtest/...

## chromium: Debian's chromium for the console's browser tests (installed when missing)
chromium:
	@command -v chromium >/dev/null || ./scripts/apt-install.sh "chromium is not installed: the console's browser tests drive it headless through the dead-letter console's pages; on a Debian 12 host: 19 packages, 117 MB download, 357 MB on disk" chromium

## nft: Debian's nftables, with which a chaos scenario drops one connection's
## packets (its own table, removed after; installed when missing)
nft:
	@command -v nft >/dev/null || ./scripts/apt-install.sh "nft is not installed: the chaos scenario that cuts one connection" nftables

## pika: Debian's python3-pika, the second service of the quorum-vhost test (installed when missing)
pika:
	@/usr/bin/python3 -c 'import pika' 2>/dev/null || ./scripts/apt-install.sh "pika is not importable by /usr/bin/python3: the Go-and-Python agreement test" python3-pika

## chaos: the fault suite against the local broker (connection cuts through a
## proxy of its own, the broker closing the suite's own connections, a few
## seconds of memory alarm, failing handlers, a deleted queue); every message
## counted, one `CHAOS <scenario>: …` line each, summed up at the end; one
## scenario cuts a connection of its own with nftables (root)
chaos: broker nft
	$(ON_BROKER) $(GO) test -race -count=1 -tags 'integration chaos' -run 'TestChaos' -timeout 15m -v ./integration/...

## cluster-test: failover on a three-node cluster of its own (c1-c3@localhost,
## ports 5681-5683) of RabbitMQ NODES_BROKER (default 4.3, inside that
## version's folder), started first and torn down after, pass or fail
cluster-test:
	@eval "$$(./scripts/broker.sh env $(NODES_BROKER))"; ./scripts/cluster.sh up && \
	trap './scripts/cluster.sh down' EXIT; trap 'exit 130' INT TERM; \
	$(GO) test -race -count=1 -tags cluster -timeout 15m -v ./integration/...

## tls-test: amqps:// against a TLS node of its own (tls@localhost, port 5691)
## of RabbitMQ NODES_BROKER (default 4.3) that the test starts with a CA it
## generates; torn down after, pass or fail
tls-test:
	@eval "$$(./scripts/broker.sh env $(NODES_BROKER))"; \
	trap './scripts/tlsnode.sh down' EXIT; trap 'exit 130' INT TERM; \
	$(GO) test -race -count=1 -tags tls -timeout 10m -v ./integration/...

## field: issue 30's field test. A three-node RabbitMQ 4.3 cluster and a
## PostgreSQL of its own (scripts/field.sh up; down again on exit, failure
## and Ctrl-C), the workload's processes (internal/cmd/fieldworker: an outbox
## writer with two relays, a plain publisher, a Standard consumer with a
## scripted handler, an inbox consumer in order), a fault schedule drawn
## from SEED for DURATION (default 4m) by the generator's newest version
## (printed; SEED, DURATION and SCHEDULE_VERSION=n replay it), then heal,
## quiescence within 3.5 min of the last heal (3 min plus twice the
## dead-letter worker's confirm timeout), and the checker's one
## `FIELD seed=…` line; exits non-zero on any violation, with the seed and
## the failing history (all of it under /tmp/acemq-fieldrun/<seed>).
## The scripted queue's broker waits go through durable rungs (quorum,
## at least once); FIELD_RUNGS=classic runs them on classic rungs for
## comparison (a rung's loss is then counted apart, as rung_lost).
## FIELD_DLX_CONFIRM_TIMEOUT (ms, default 15000) is the nodes'
## dead_letter_worker_publisher_confirm_timeout (docs/field.md).
## FIELD_MODE=cluster runs on scripts/cluster.sh's nodes instead, with the
## orchestrator's own drill (process kills, connection cuts, a node killed),
## no packet filter needed. FIELDFLAGS passes flags on (-bound, -rate, …).
## One run at a time per instance (a lock in /tmp): the cluster is one.
## The nodes it starts must not inherit the lock's descriptor (9>&-), or
## they hold it after the run.
FIELD_MODE ?= field
SEED       ?=
SCHEDULE_VERSION ?=
FIELD_RUNGS ?=
FIELD_DLX_CONFIRM_TIMEOUT ?=
field: DURATION ?= 4m
soak: DURATION ?= 1h
export SEED DURATION SCHEDULE_VERSION FIELD_RUNGS FIELD_DLX_CONFIRM_TIMEOUT
# FIELD_INSTANCE=N (0-9) runs on field.sh's instance N, beside the others:
# its own nodes, ports, PostgreSQL, histories and lock (the environment
# carries it to field.sh and the orchestrator).
FIELD_LOCK = /tmp/acemq-field-$(FIELD_MODE)$(if $(filter-out 0,$(FIELD_INSTANCE)),-$(FIELD_INSTANCE)).lock
ifeq ($(FIELD_MODE),cluster)
FIELD_UP   = ./scripts/cluster.sh up
FIELD_DOWN = ./scripts/cluster.sh down
else
FIELD_UP   = ./scripts/field.sh up
FIELD_DOWN = ./scripts/field.sh down
endif
# FIELD_RUN: the instance's lock, the field up (and down again on exit,
# failure and Ctrl-C), then the orchestrator; the recipe adds its flags.
FIELD_RUN = exec 9>$(FIELD_LOCK); flock -w 1800 9 || { echo "field: another run holds $(FIELD_LOCK)"; exit 1; }; \
	eval "$$(./scripts/broker.sh env 4.3)"; \
	trap '$(FIELD_DOWN)' EXIT; trap 'exit 130' INT TERM; \
	$(FIELD_UP) 9>&- && $(GO) run ./internal/cmd/field -mode $(FIELD_MODE)
field:
	@$(FIELD_RUN) $(FIELDFLAGS) 9>&-

## soak: the field's workload and faults for DURATION (default 1h), the
## workers' RSS, goroutines, fds and connections, the broker's channels and
## backlog, and consumer lag sampled every 10 s into docs/soak.tsv, plotted
## to docs/soak.png by gnuplot (Debian's gnuplot-nox, installed when missing)
soak: gnuplot
	@$(FIELD_RUN) -soak docs/soak.tsv -sample 10s $(FIELDFLAGS) 9>&-; rc=$$?; \
	./scripts/soakplot.sh docs/soak.tsv docs/soak.png && exit $$rc

## gnuplot: Debian's gnuplot-nox for the soak's plot (installed when missing)
gnuplot:
	@command -v gnuplot >/dev/null || ./scripts/apt-install.sh "gnuplot is not installed: the soak's plot" gnuplot-nox

## field-up / field-down: the field of issue 30 on its own (scripts/field.sh):
## f1-f3@127.0.0.21-23 (AMQP 5701-5703) of the sid folder's RabbitMQ 4.3,
## partitionable with nftables, and a PostgreSQL on 5441; down removes all of it
.PHONY: field-up field-down
field-up:
	./scripts/field.sh up
field-down:
	./scripts/field.sh down

## field-facts: what RabbitMQ 4.3 and a plain client do in each partition,
## measured on a field of its own (FIELD_INSTANCE=1, beside `make field`'s);
## prints FIELDFACT lines (docs/reliability.md, Field)
.PHONY: field-facts
field-facts:
	@export FIELD_INSTANCE=$${FIELD_INSTANCE:-1}; ./scripts/field.sh up && \
	trap './scripts/field.sh down' EXIT; trap 'exit 130' INT TERM; \
	$(GO) test -count=1 -tags field -run 'TestFieldPartition|TestFieldIsolate|TestFieldOneway|TestFieldFaultRun' -timeout 20m -v ./integration/

## demo: the demo service against the local broker, its names under a per-run prefix; exits by itself and leaves nothing behind, also on Ctrl-C
demo: broker
	$(GO) run ./examples/orders

## fuzz: every fuzz target for FUZZTIME (default 30s) each; crashers become regression tests
## (integration's round-trip target publishes to the local broker)
fuzz: broker
	./scripts/fuzz.sh

## bench: raw amqp091-go vs this library on the local broker, same run, rounds
## alternating: msgs/s, ratio to raw, client and broker CPU per message, on
## classic and quorum queues; prints docs/performance.md's table (BENCHFLAGS
## passes flags on, e.g. -rounds 7); then the same on each of BENCH_BROKERS
## (default 4.3); then the middleware chain and the per-delivery tracing cost
## without a broker
BENCH_BROKERS ?= 4.3
bench: broker
	$(GO) run ./internal/cmd/benchreport $(BENCHFLAGS)
	@set -e; for v in $(BENCH_BROKERS); do \
		echo "== bench on RabbitMQ $$v"; \
		eval "$$(./scripts/broker.sh env $$v)"; $(GO) run ./internal/cmd/benchreport $(BENCHFLAGS); \
	done
	$(GO) test -run '^$$' -bench . -benchmem ./middleware
	$(GO) test -run '^$$' -bench 'BenchmarkAttempts/(tracing|sdk-required|sdk-floor|none)' -benchmem ./otelmq

## modules: prove the module layout as a user meets it (scripts/modules.sh
## check): from a copy of this work tree released as v0.999.0 and served by
## git, `go install …/cmd/acemq@latest`, `go get …/outbox@latest`, and a
## core-only module whose build list holds none of chromedp, kong,
## progressbar, pgx (third-party modules from the module cache, else GOPROXY)
.PHONY: modules
modules:
	./scripts/modules.sh check

## lint: go vet, gofmt and staticcheck (fetched through the Go module proxy)
lint: vet
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) run $(STATICCHECK) $(PKGS)
	$(GO) run $(STATICCHECK) -tags integration ./integration/... ./outbox/outboxtest/...
	$(GO) run $(STATICCHECK) -tags 'integration chaos' ./integration/...
	$(GO) run $(STATICCHECK) -tags cluster ./integration/...
	$(GO) run $(STATICCHECK) -tags tls ./integration/...
	$(GO) run $(STATICCHECK) -tags field ./integration/... ./internal/cmd/field

vet:
	$(GO) vet $(PKGS)
	$(GO) vet -tags integration ./integration/... ./outbox/outboxtest/...
	$(GO) vet -tags 'integration chaos' ./integration/...
	$(GO) vet -tags cluster ./integration/...
	$(GO) vet -tags tls ./integration/...
	$(GO) vet -tags field ./integration/... ./internal/cmd/field

fmt:
	gofmt -w $$(git ls-files '*.go')
