# Tether's two everyday commands are `make dev` and `make test`; see README.md.

GO      ?= go
# Fuzz budgets are counts, not durations: with a duration, Go 1.26's fuzz
# coordinator can fail a run at the deadline with a bare "context deadline
# exceeded" (golang/go#75804). Go pauses fuzzing for up to a minute to
# minimize each new input; 100x keeps a short run fuzzing.
FUZZTIME ?= 100000x

# Every native fuzz target, as package:Target. CI runs each briefly.
FUZZ_TARGETS = \
	./internal/protocol:FuzzRead \
	./internal/protocol:FuzzReadUpdate \
	./internal/fleet:FuzzParseAgents \
	./internal/auth:FuzzParseUsers \
	./internal/auth:FuzzAuthenticate

.PHONY: dev test kube chromium vet unit fuzz build bench-inventory

## dev: run a local API server, a hub and an agent (tether dev).
dev:
	$(GO) run ./cmd/tether dev

## build: build bin/tether.
build:
	$(GO) build -o bin/tether ./cmd/tether

## test: everything CI runs: the Kubernetes build (cached), vet, the tests with -race, and a short fuzz of every target.
test: kube chromium vet unit fuzz

## bench-inventory: 10,000 pods in a real API server: the agent's RSS, the hub's memory for the cluster, the snapshot's time.
bench-inventory: kube
	$(GO) run ./bench/inventory -out bench/inventory-results.json

## kube: build (once, then cached) the kube-apiserver, etcd and kubectl the tests run.
kube:
	$(GO) run ./test/prepare

## chromium: install Debian's Chromium for the browser tests when it is missing (as root: apt-get).
chromium:
	@if command -v chromium >/dev/null || [ -x /usr/bin/chromium ]; then :; \
	elif [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	else echo "Browser tests need Chromium: sudo apt-get install chromium"; fi

vet:
	$(GO) vet ./...
	@test -z "$$(gofmt -l cmd internal test)" || { echo "gofmt needed:"; gofmt -l cmd internal test; exit 1; }

unit:
	$(GO) test -race -count=1 -timeout 30m ./...

fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t##*:}; \
		echo "fuzz $$pkg $$name for $(FUZZTIME)"; \
		$(GO) test -run '^$$' -fuzz "^$$name$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 100x $$pkg; \
	done
