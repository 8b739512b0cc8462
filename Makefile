# minimax-m3: every command a user or CI runs. `make help` lists them.
SHELL := bash
.DEFAULT_GOAL := help

# The DynamoGraphDeployment and ComputeDomain CRDs the integration tests and the local run install.
# Point it at your own Dynamo release's CRDs to test against them.
MINIMAX_M3_CRDS ?= $(abspath ../shared/reference/crds)
export MINIMAX_M3_CRDS
# The upstream recipe the adoption test deploys with kubectl before moving it under Pulumi.
MINIMAX_M3_RECIPE ?= $(abspath ../shared/reference/minimax-m3)
export MINIMAX_M3_RECIPE
export PULUMI_SKIP_UPDATE_CHECK := true

GO_FILES = $(shell git ls-files '*.go')

.PHONY: help toolchain runtime linters browser check unit integration test local render policy pr-check bench

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

toolchain: ## build the pinned Pulumi CLI, Go language host, Kubernetes provider, kube-apiserver, etcd, kube-controller-manager, kube-scheduler, kwok, linters, the Dynamo operator and the DRA driver's compute-domain-controller (cached)
	bash tools/build.sh

runtime: ## build the toolchain but the linters (all that `make local`, `make integration` and the commands run; cached)
	bash tools/build.sh runtime

linters: ## build only golangci-lint and actionlint (all that `make check` needs; cached)
	bash tools/build.sh linters

browser: ## install Chromium from Debian's packages if missing (the portal page's test drives it headless)
	@command -v chromium >/dev/null || { \
	  sudo=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y --no-install-recommends chromium || \
	  { $$sudo apt-get update && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y --no-install-recommends chromium; }; }

# The checks and tests build with -trimpath: Go's build cache then keys the project's own packages
# by their content, not their folder, so a fresh clone (as CI makes) reuses what any clone built.
TRIM = GOFLAGS="$(strip $(GOFLAGS) -trimpath)"

check: linters ## gofmt, go vet and golangci-lint (program and tests), actionlint (workflows)
	@unformatted=$$(gofmt -l $(GO_FILES)); if [ -n "$$unformatted" ]; then echo "gofmt would change: $$unformatted"; exit 1; fi
	$(TRIM) go vet ./...
	cd tests && $(TRIM) go vet ./...
	$(TRIM) .toolchain/bin/golangci-lint run ./...
	cd tests && $(TRIM) ../.toolchain/bin/golangci-lint run --config ../.golangci.yml ./...
	.toolchain/bin/actionlint .github/workflows/*.yml

unit: ## config and mocked-engine tests, under the race detector (Go and a C compiler; no toolchain needed)
	$(TRIM) go test -race -count=1 ./...
	cd tests && $(TRIM) go test -race -count=1 ./suites/unit

integration: runtime browser ## the real engine, provider and API server with the CRDs from MINIMAX_M3_CRDS; the rack box (real control plane, kwok racks, real Dynamo operator)
	cd tests && $(TRIM) go test -count=1 -timeout 45m -parallel 4 -v ./framework/rackbox ./suites/integration

test: check unit integration ## every test: what CI runs

local: runtime ## the main job on an embedded default: the rack box (real control plane, one simulated NVL72 rack, the real Dynamo operator), both stacks to Ready (PORTAL=1: then the portal page until Ctrl-C)
	cd tests && go run ./cmd/local

render: ## render STACK's manifests into OUT without a cluster (make render STACK=agg OUT=/tmp/agg NAMESPACE=inference)
	@test -n "$(STACK)" -a -n "$(OUT)" || { echo "usage: make render STACK=agg|disagg OUT=<dir outside the repo> [NAMESPACE=<ns>]"; exit 2; }
	PATH="$(CURDIR)/.toolchain/bin:$$PATH" PULUMI_HOME="$(CURDIR)/.toolchain/pulumi-home" \
	  go run ./cmd/render -stack $(STACK) -out $(OUT) $(if $(NAMESPACE),-set minimax-m3:namespace.name=$(NAMESPACE))

policy: ## check the policies on both stacks' rendered objects, no cluster (NAMESPACE= to override the placeholder)
	PATH="$(CURDIR)/.toolchain/bin:$$PATH" PULUMI_HOME="$(CURDIR)/.toolchain/pulumi-home" \
	  go run ./cmd/policy -set minimax-m3:namespace.name=$(or $(NAMESPACE),policy-check)

pr-check: runtime ## what the working tree does to live stacks deployed from BASE (make pr-check BASE=main [ROLL=Worker,...])
	@test -n "$(BASE)" || { echo "usage: make pr-check BASE=<git ref> [ROLL=Frontend,Worker,PrefillWorker,DecodeWorker|all] [STACKS=agg]"; exit 2; }
	cd tests && go run ./cmd/prcheck -base $(BASE) $(if $(ROLL),-roll $(ROLL)) $(if $(STACKS),-stacks $(STACKS))

bench: runtime ## side by side on the local API server (hyperfine, 5 runs): recipe dry run, preview (CLI, Automation API), no-op up, render, unit suite
	cd tests && go run ./cmd/bench $(if $(RUNS),-runs $(RUNS))
