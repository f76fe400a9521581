# Tether's two everyday commands are `make dev` and `make test`; see README.md.

GO      ?= go
# Each fuzz target runs for FUZZSECONDS, as a loop of runs each bounded by a
# count (FUZZCHUNK), not one run bounded by a duration: with a duration, Go
# 1.26's fuzz coordinator can fail a run at the deadline with a bare
# "context deadline exceeded" and no crasher (golang/go#75804, fixed in Go
# 1.27 only). A count has no deadline to race. Each run starts from the
# corpus the last one left in the build cache, so the loop keeps fuzzing
# where it stopped; a target may run over by one chunk. Go pauses fuzzing to
# minimize each new input; a 100x budget keeps that short.
FUZZSECONDS ?= 20
FUZZCHUNK   ?= 10000x

# Every native fuzz target, as package:Target: every decoder and parser of
# input from outside (docs/RELIABILITY.md lists what each covers).
FUZZ_TARGETS = \
	./internal/protocol:FuzzRead \
	./internal/protocol:FuzzReadUpdate \
	./internal/fleet:FuzzParseAgents \
	./internal/fleet:FuzzParseClusters \
	./internal/auth:FuzzParseUsers \
	./internal/auth:FuzzAuthenticate \
	./internal/auth:FuzzCheckIdentity \
	./internal/auth:FuzzOptionsFromEnv \
	./internal/auth:FuzzOIDCClaims \
	./internal/auth:FuzzParseKeys \
	./internal/agent:FuzzParseHubURL \
	./internal/agent:FuzzOptionsFromEnv \
	./internal/agent:FuzzRetryAfter \
	./internal/logging:FuzzRedactURL \
	./internal/inventory/watch:FuzzParseDiscovery \
	./internal/inventory/watch:FuzzSummarize \
	./internal/inventory/watch:FuzzFollowWatch \
	./internal/inventory/watch:FuzzDecodeList \
	./internal/hub:FuzzAgentUpgradeHeaders \
	./internal/hub:FuzzCheckHello \
	./internal/hub:FuzzParseCA \
	./internal/kubeproxy:FuzzRewrite \
	./internal/kubeproxy:FuzzRewritePath \
	./internal/kubeproxy:FuzzRedirect \
	./internal/kubeproxy:FuzzWatchBody \
	./internal/kubeproxy:FuzzAuditLine \
	./internal/kubeproxy:FuzzStreamAudit \
	./internal/recording:FuzzWebSocketParser \
	./internal/recording:FuzzSPDYParser \
	./internal/web:FuzzParseQuery \
	./internal/web:FuzzLoginRequests \
	./internal/web:FuzzDeviceIssuer \
	./internal/web:FuzzWantsNDJSON \
	./internal/web:FuzzReturnTo \
	./internal/server:FuzzBasePath \
	./internal/login:FuzzTokenExpiry \
	./internal/web:FuzzDecodePerson \
	./internal/replicas:FuzzVerify \
	./internal/peers:FuzzDecode \
	./internal/tunnel:FuzzSession \
	./internal/tunnel:FuzzWebSocket \
	./internal/tunnel:FuzzHandshake

# The helm the chart tests run (test/chart, test/e2e), installed once into
# the user's cache directory, where internal/testutil/helmtest looks for it.
# Keep HELM_VERSION in step with helmtest.Version (a test checks).
HELM_VERSION = v3.22.0
CACHE_DIR   ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/tether
HELM         = $(CACHE_DIR)/helm-$(HELM_VERSION)/helm

# What the image runs (see Dockerfile): a static binary, no cgo, no local
# paths, stamped with VERSION.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo v0.1.0-dev)
OUT     ?= bin/tether-static
STATIC_LDFLAGS = -s -w -X github.com/tetherhq/tether/internal/version.Version=$(VERSION)

.PHONY: dev test kube helm chromium haproxy vet unit perf-check fuzz build static bench bench-inventory soak generate

## dev: run a local API server, a hub and an agent (tether dev).
# Built, then run, not `go run`: go run exits 1 on Ctrl-C, which make reports
# as an error, while tether dev stops cleanly and exits 0.
dev: build
	./bin/tether dev

## build: build bin/tether.
build:
	$(GO) build -o bin/tether ./cmd/tether

## test: everything CI runs: the Kubernetes build (cached), vet, the tests with -race, the short performance check, and a short fuzz of every target.
test: kube helm chromium haproxy vet unit perf-check fuzz

## bench: the full performance suite (about 10 minutes once the Kubernetes build is cached); writes docs/PERFORMANCE.md and bench/results.json.
bench:
	$(GO) run ./bench

## perf-check: a short version of the bench, with bounds half as strict as the budgets, and the checks of memory a hostile agent can make the hub take. Without -race, which slows the tunnel tenfold and inflates memory.
perf-check:
	$(GO) test -tags perfcheck -count=1 -timeout 10m ./bench
	$(GO) test -tags perfcheck -count=1 -timeout 5m -run '^TestPerf' ./internal/inventory/store

## bench-inventory: 10,000 pods, 20,000 ReplicaSets and 1,000 Argo Workflows in a real API server: the agent's RSS, the hub's memory for the cluster, the snapshot's time.
bench-inventory: kube
	$(GO) run ./bench/inventory -out bench/inventory-results.json

## kube: build (once, then cached) the kube-apiserver, kube-controller-manager, etcd, kubectl and test kubelet that the tests and `tether dev` run.
kube:
	$(GO) run ./test/prepare

## helm: install (once, then cached) the helm the chart tests run.
helm: $(HELM)

$(HELM):
	GOBIN=$(dir $(HELM)) CGO_ENABLED=0 $(GO) install helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)

## static: build the image's binary into OUT, exactly as the Dockerfile does.
static:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(STATIC_LDFLAGS)" -o $(OUT) ./cmd/tether

## chromium: install Debian's Chromium for the browser tests when it is missing (as root: apt-get).
chromium:
	@if command -v chromium >/dev/null || [ -x /usr/bin/chromium ]; then :; \
	elif [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	elif [ -n "$$CI" ]; then echo "Browser tests need Chromium, and only root can install it here: sudo apt-get install chromium"; exit 1; \
	else echo "Browser tests need Chromium: sudo apt-get install chromium"; fi

## haproxy: install Debian's HAProxy, the load balancer in front of the hub replicas in the end-to-end tests, when it is missing (as root: apt-get).
haproxy:
	@if command -v haproxy >/dev/null || [ -x /usr/sbin/haproxy ]; then :; \
	elif [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq haproxy >/dev/null; \
	elif [ -n "$$CI" ]; then echo "The hub replicas' tests need HAProxy, and only root can install it here: sudo apt-get install haproxy"; exit 1; \
	else echo "The hub replicas' tests need HAProxy: sudo apt-get install haproxy"; fi

# The hub's pages are internal/web/pages.templ; templ turns them into Go.
TEMPL = $(GO) run github.com/a-h/templ/cmd/templ@v0.3.1118

generate:
	cd internal/web && $(TEMPL) generate -f pages.templ

vet:
	$(GO) vet ./...
	@d=$$(mktemp -d) && cp internal/web/pages.templ $$d && (cd $$d && $(TEMPL) generate -f pages.templ >/dev/null 2>&1); \
	cmp -s $$d/pages_templ.go internal/web/pages_templ.go; s=$$?; rm -r $$d; [ $$s = 0 ] || { echo "internal/web/pages_templ.go is older than pages.templ: make generate"; exit 1; }
	$(GO) vet -tags perfcheck ./bench ./internal/inventory/store
	@test -z "$$(gofmt -l cmd internal test bench)" || { echo "gofmt needed:"; gofmt -l cmd internal test bench; exit 1; }

unit:
	$(GO) test -race -count=1 -timeout 30m ./...

fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t##*:}; \
		start=$$(date +%s); runs=0; \
		while [ $$(( $$(date +%s) - start )) -lt $(FUZZSECONDS) ]; do \
			$(GO) test -run '^$$' -fuzz "^$$name$$" -fuzztime $(FUZZCHUNK) -fuzzminimizetime 100x $$pkg >/tmp/tether-fuzz.$$$$.log 2>&1 \
				|| { cat /tmp/tether-fuzz.$$$$.log; rm -f /tmp/tether-fuzz.$$$$.log; exit 1; }; \
			runs=$$((runs + 1)); \
		done; \
		rm -f /tmp/tether-fuzz.$$$$.log; \
		echo "fuzz $$pkg $$name: $$runs runs of $(FUZZCHUNK) in $$(( $$(date +%s) - start )) s"; \
	done

## soak: a long run of churning agents, streams and watches; fails if goroutines, heap or fds grow (not CI).
soak:
	$(GO) run ./bench/soak -duration $${SOAK_DURATION:-1h}
