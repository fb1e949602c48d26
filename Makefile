# AceMQ for Go. `make demo` runs the demo service against a local broker;
# `make test` runs every unit and integration test with the race detector.
# Both start a local RabbitMQ first if none answers (scripts/broker.sh).

GO        ?= go
AMQP_URL  ?= amqp://guest:guest@127.0.0.1:5672/
export AMQP_URL

STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2

.PHONY: all test unit integration lint vet fmt broker demo chaos cluster-test fuzz bench

all: lint test

## broker: make sure a local RabbitMQ answers (install and start it if needed)
broker:
	@./scripts/broker.sh

## test: unit tests, then integration tests against the local broker, all with -race
test: broker unit integration

unit:
	$(GO) test -race -count=1 ./...

integration: broker
	$(GO) test -race -count=1 -tags integration -timeout 10m ./integration/...

## lint: go vet, gofmt and staticcheck (fetched through the Go module proxy)
lint: vet
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) run $(STATICCHECK) ./...
	$(GO) run $(STATICCHECK) -tags integration ./integration/...

vet:
	$(GO) vet ./...
	$(GO) vet -tags integration ./integration/...

fmt:
	gofmt -w $$(git ls-files '*.go')
