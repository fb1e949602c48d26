# AceMQ for Go. `make demo` runs the demo service against a local broker;
# `make test` runs every unit and integration test with the race detector.
# Both start a local RabbitMQ first if none answers (scripts/broker.sh).

GO        ?= go
AMQP_URL  ?= amqp://guest:guest@127.0.0.1:5672/
export AMQP_URL

STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2

.PHONY: postgres bench-outbox
.PHONY: all test unit integration lint vet fmt broker demo chaos cluster-test tls-test fuzz bench chromium

all: lint test

## broker: make sure a local RabbitMQ answers (install and start it if needed)
broker:
	@./scripts/broker.sh

## postgres: make sure the machine's PostgreSQL 15 answers on 127.0.0.1:5432
## with a database test (the outbox suites need it); starts it when it does not
postgres:
	@./scripts/postgres.sh

# The outbox suites (integration, chaos, bench) need PostgreSQL.
integration chaos bench: postgres

## bench-outbox: the outbox and the inbox against baselines of the same run
## (tx cost, relay throughput, commit-to-delivery latency, inbox overhead);
## part of `make bench` (OUTBOXBENCHFLAGS passes flags on, e.g. -rounds 7)
bench-outbox: broker postgres
	$(GO) run ./internal/cmd/outboxbench $(OUTBOXBENCHFLAGS)

bench: bench-outbox

## test: unit tests, then integration tests against the local broker, all with -race
test: broker unit integration

unit:
	$(GO) test -race -count=1 ./...

integration: broker chromium
	$(GO) test -race -count=1 -tags integration -timeout 10m ./integration/...

## chromium: Debian's chromium for the console's browser tests (installed when missing)
chromium:
	@command -v chromium >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; }

## chaos: the fault suite against the local broker (connection cuts through a
## proxy of its own, the broker closing the suite's own connections, a few
## seconds of memory alarm, failing handlers, a deleted queue); every message
## counted, one `CHAOS <scenario>: …` line each, summed up at the end
chaos: broker
	$(GO) test -race -count=1 -tags 'integration chaos' -run 'TestChaos' -timeout 15m -v ./integration/...

## cluster-test: failover on a three-node cluster of its own (c1-c3@localhost,
## ports 5681-5683), started first and torn down after, pass or fail
cluster-test:
	./scripts/cluster.sh up
	@trap './scripts/cluster.sh down' EXIT; trap 'exit 130' INT TERM; \
	$(GO) test -race -count=1 -tags cluster -timeout 15m -v ./integration/...

## tls-test: amqps:// against a TLS node of its own (tls@localhost, port 5691)
## that the test starts with a CA it generates; torn down after, pass or fail
tls-test:
	@trap './scripts/tlsnode.sh down' EXIT; trap 'exit 130' INT TERM; \
	$(GO) test -race -count=1 -tags tls -timeout 10m -v ./integration/...

## demo: the demo service against the local broker; exits by itself, leaves nothing behind
demo: broker
	$(GO) run ./examples/orders

## fuzz: every fuzz target for FUZZTIME (default 30s) each; crashers become regression tests
## (integration's round-trip target publishes to the local broker)
fuzz: broker
	./scripts/fuzz.sh

## bench: raw amqp091-go vs this library on the local broker, same run, rounds
## alternating: msgs/s, ratio to raw, client and broker CPU per message; prints
## the README's table (BENCHFLAGS passes flags on, e.g. -rounds 7); then the
## middleware chain and the per-delivery tracing cost without a broker
bench: broker
	$(GO) run ./internal/cmd/benchreport $(BENCHFLAGS)
	$(GO) test -run '^$$' -bench . -benchmem ./middleware
	$(GO) test -run '^$$' -bench 'BenchmarkAttempts/(tracing|sdk-required|sdk-floor|none)' -benchmem ./otelmq

## lint: go vet, gofmt and staticcheck (fetched through the Go module proxy)
lint: vet
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) run $(STATICCHECK) ./...
	$(GO) run $(STATICCHECK) -tags integration ./integration/...
	$(GO) run $(STATICCHECK) -tags 'integration chaos' ./integration/...
	$(GO) run $(STATICCHECK) -tags cluster ./integration/...
	$(GO) run $(STATICCHECK) -tags tls ./integration/...

vet:
	$(GO) vet ./...
	$(GO) vet -tags integration ./integration/...
	$(GO) vet -tags 'integration chaos' ./integration/...
	$(GO) vet -tags cluster ./integration/...
	$(GO) vet -tags tls ./integration/...

fmt:
	gofmt -w $$(git ls-files '*.go')
