# Talos clusters on Proxmox VE or VPS machines, one Pulumi stack per environment.
# `make help` lists the targets. Pulumi targets need STACK=<name> (e.g. proxmox-homelab).

SHELL := /bin/bash
.DEFAULT_GOAL := help

STACK ?=
PULUMI ?= pulumi
GO ?= go
# Local file backend inside the repository unless you point PULUMI_BACKEND_URL elsewhere
# (s3://..., https://api.pulumi.com, ...). No Pulumi Cloud login is needed by default.
LOCAL_BACKEND_DIR := $(CURDIR)/.pulumi-state
PULUMI_BACKEND_URL ?= file://$(LOCAL_BACKEND_DIR)
export PULUMI_BACKEND_URL
# Secrets provider for new stacks: passphrase (PULUMI_CONFIG_PASSPHRASE or
# PULUMI_CONFIG_PASSPHRASE_FILE), or e.g. awskms://..., hashivault://...
SECRETS_PROVIDER ?= passphrase
ACCESS_DIR ?= .access
FUZZTIME ?= 60s
GOLANGCI_LINT_VERSION ?= v2.6.2
# Pinned tools (golangci-lint, kube-apiserver) are built once per machine into TOOLS_CACHE, under
# their version and the Go version that built them, and reused by every checkout and every later
# run: a new machine pays once (minutes), a warm one nothing.
# The names are evaluated only by the targets that use them (no go command run for the others),
# and each tool has a pattern rule, which make reads without evaluating them.
TOOLS_CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/talos-pulumi/tools
TOOLS_DIR = $(abspath $(TOOLS_CACHE))
GO_VERSION = $(shell $(GO) env GOVERSION)
GOLANGCI_LINT = $(TOOLS_DIR)/golangci-lint-$(GOLANGCI_LINT_VERSION)-$(GO_VERSION)/golangci-lint
ACTIONLINT_VERSION ?= v1.7.12
ACTIONLINT = $(TOOLS_DIR)/actionlint-$(ACTIONLINT_VERSION)-$(GO_VERSION)/actionlint
# YES=1: no confirmation prompt (--yes) for up, refresh, destroy and adopt, e.g. outside a terminal,
# where pulumi refuses to prompt.
YES ?=
YES_FLAG = $(if $(filter 1 y yes true,$(YES)),--yes)
# $(call quote,VALUE) is VALUE single-quoted for the recipes' shell, as internal/shell.Quote
# quotes the values of the generated scripts: the shell reads it back unchanged, nothing in it
# expanded or split. Every value a recipe passes on (STACK, KEY, SECRETS, RELEASES, paths) goes
# through it. (make expands a $ in a value on its own command line first: write $$ for a $.) make
# would cut a recipe line at a line break inside a value, so such a value stops make instead.
define newline


endef
quote = $(if $(findstring $(newline),$(1)),$(error A value with a line break cannot be passed on: "$(1)"),'$(subst ','\'',$(1))')

# Built once per source change, into bin/ (git-ignored): make compares the binaries' times with
# those of go.mod, go.sum and every file of the package folders they are built from (Go sources
# and the scripts they embed), tests and testdata aside. The folders count too, so that a deleted
# or added file is a change. stackctl's own packages (cmd/stackctl/internal/...) count for
# bin/stackctl only: the program cannot import them.
go_inputs = $(shell find $(1) \( -name testdata -o -name '.*' \) -prune -o -name '*_test.go' -o -print 2>/dev/null)
GO_INPUTS := go.mod go.sum $(call go_inputs,components internal program stacks)
PROGRAM_INPUTS := $(filter-out %_test.go,$(wildcard *.go)) $(GO_INPUTS)
# The component provider: a Go module of its own under provider/ (it needs
# github.com/pulumi/pulumi/pkg, the program does not), built from the same
# components.
PROVIDER_DIR := provider
PROVIDER_BIN := bin/pulumi-resource-talos-anywhere
PROVIDER_INPUTS := $(call go_inputs,$(PROVIDER_DIR)/) $(GO_INPUTS)
PROVIDER_NAME := pulumi-resource-talos-anywhere
# The package's version: provider/talosprovider/VERSION, embedded in the binary (see
# talosprovider.Version): the release's on its tagged commit, the next one's with -dev between.
PROVIDER_VERSION_SOURCE := $(PROVIDER_DIR)/talosprovider/VERSION
# `make release` builds only a commit tagged v<VERSION>: RELEASE_TAG is the commit's tag.
RELEASE_TAG ?= $(shell git describe --tags --exact-match --match 'v[0-9]*' 2>/dev/null)
# `make release`: one tarball per platform in RELEASE_DIR, named as Pulumi's plugin downloads
# ask for them: pulumi-resource-talos-anywhere-v<version>-<os>-<arch>.tar.gz.
RELEASE_PLATFORMS ?= linux/amd64 linux/arm64 darwin/amd64 darwin/arm64 windows/amd64 windows/arm64
RELEASE_DIR ?= dist
# The release builds' environment and flags: static binaries without the builder's paths. (The
# test of the target empties them, so that it reuses the build cache of the tests' own builds.)
RELEASE_GOENV ?= CGO_ENABLED=0
RELEASE_BUILDFLAGS ?= -trimpath
STACKCTL_INPUTS := $(call go_inputs,cmd) $(GO_INPUTS)
# The operator tools (doctor, the ssh-proxy helper). `exec` runs a pulumi command with the helper
# around it when the stack has proxmox.access: ssh-proxy, and runs it unchanged otherwise.
STACKCTL ?= bin/stackctl
WITH_ACCESS = $(STACKCTL) exec --stack $(call quote,$(STACK)) --pulumi $(call quote,$(PULUMI)) --
# The Pulumi program, prebuilt. Pulumi's Go language host would otherwise compile and link it
# into a temporary file on every preview, up and destroy --run-program.
PROGRAM ?= bin/talos-cluster
# The stack operations run pulumi in bin/project (--cwd), whose Pulumi.yaml is generated from
# Pulumi.yaml: the same project (name, config types) with `main` and `stackConfigDir` pointing back
# here (the program runs in this folder, Pulumi.<stack>.yaml is this folder's) and the Go runtime
# told to run $(PROGRAM) (runtime.options.binary) instead of building the program. Pulumi.yaml
# itself is unchanged, so `pulumi up -s <stack>` here builds the program as always.
PROJECT_DIR := bin/project
PROJECT_FILE := $(PROJECT_DIR)/Pulumi.yaml
IN_PROJECT := --cwd $(PROJECT_DIR)
# pulumi resolves a relative file:// backend or passphrase file against its own working directory:
# made absolute here, they name the same files for pulumi in bin/project as for pulumi here.
ifneq ($(filter file://%,$(PULUMI_BACKEND_URL)),)
ifeq ($(filter file:///% file://~%,$(PULUMI_BACKEND_URL)),)
override PULUMI_BACKEND_URL := file://$(CURDIR)/$(patsubst file://%,%,$(PULUMI_BACKEND_URL))
endif
endif
# With no passphrase set, a stack's own passphrase file is used where it exists: `make local` writes
# one for the local stack, so every later target finds it in a new shell too.
STACK_PASSPHRASE_FILE = $(or $(XDG_CONFIG_HOME),$(HOME)/.config)/talos-cluster/$(STACK)-passphrase
ifeq ($(PULUMI_CONFIG_PASSPHRASE)$(PULUMI_CONFIG_PASSPHRASE_FILE),)
ifneq ($(STACK),)
ifneq ($(wildcard $(STACK_PASSPHRASE_FILE)),)
PULUMI_CONFIG_PASSPHRASE_FILE := $(STACK_PASSPHRASE_FILE)
endif
endif
endif
ifneq ($(PULUMI_CONFIG_PASSPHRASE_FILE),)
override PULUMI_CONFIG_PASSPHRASE_FILE := $(abspath $(PULUMI_CONFIG_PASSPHRASE_FILE))
export PULUMI_CONFIG_PASSPHRASE_FILE
endif

##@ Development

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"; printf "Usage: make <target> [STACK=<stack>] [YES=1]\n  YES=1: no confirmation prompt (pulumi --yes) for up, refresh, destroy and adopt\n"} \
		/^[a-zA-Z0-9_-]+:.*?##/ { printf "  \033[36m%-10s\033[0m %s\n", $$1, $$2 } \
		/^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) }' $(MAKEFILE_LIST)

.PHONY: test
test: ## Run every test once (formatting, unit, mocks, fuzz seed corpora, each benchmark once; RACE_PACKAGES under the race detector). What CI runs first.
	@bash scripts/test-deps.sh check
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
		if [ -n "$$unformatted" ]; then echo "gofmt needed: $$unformatted"; exit 1; fi
	@# Every benchmark runs once too (-benchtime 1x), after the tests in the same test binaries, so
	@# that they keep compiling and passing without a second link of every package; `make bench`
	@# measures. Their result lines are left out. The packages with concurrency of their own run
	@# under the race detector instead of twice (with and without it); go test's own vet checks
	@# run on both, `make lint` runs all of vet's, with the integration and e2e tests' tags too.
	set -o pipefail; $(GO) test $(TEST_FLAGS) -bench . -benchtime 1x $(NORACE_PACKAGES) \
		| { grep -vE '^(goos|goarch|pkg|cpu): |^Benchmark[^[:space:]]*[[:space:]]+1[[:space:]]|^PASS$$' || true; }
	set -o pipefail; $(GO) test $(TEST_FLAGS) -race -bench . -benchtime 1x $(RACE_PACKAGES) \
		| { grep -vE '^(goos|goarch|pkg|cpu): |^Benchmark[^[:space:]]*[[:space:]]+1[[:space:]]|^PASS$$' || true; }
	@# The component provider, a module of its own (see docs/component-package.md).
	cd $(PROVIDER_DIR) && $(GO) test $(TEST_FLAGS) ./...

# The flags of every test run of make test: no DWARF in the test binaries (nothing debugs them
# there, and each link takes a quarter less time).
TEST_FLAGS ?= -count=1 -ldflags=-w

# The packages with integration tests (files *_integration_test.go, build tag `integration`).
INTEGRATION_PACKAGES ?= ./components/proxmox ./components/docker ./internal/talosapi/talosapitest ./cmd/stackctl/internal/driver ./cmd/stackctl/internal/cli ./cmd/stackctl/internal/restore ./program

.PHONY: integration
integration: ## Run the integration tests with the real pulumi CLI (Automation API driver, preview's exit code, adopt, the read of the last outputs, the TypeScript and YAML examples, the Go and Python SDKs; needs pulumi and the plugins the program uses).
	@command -v pulumi >/dev/null || { echo "make integration: the pulumi CLI is not on PATH (see CONTRIBUTING.md, Integration tests)"; exit 1; }
	$(GO) test -count=1 -tags integration -run Integration -v $(INTEGRATION_PACKAGES)
	@# The examples with the generated SDK and the built binary, the Go and Python SDKs (each skipped,
	@# saying so, without node and npm, or the Python language host).
	cd $(PROVIDER_DIR) && $(GO) test -count=1 -tags integration -run Integration -v ./talosprovider

# The real kube-apiserver, for the tests that hold the Kubernetes fake (internal/kubeapi/kubeapitest)
# to it: `make e2e-kube`. k8s.io/kubernetes cannot be `go install`ed (its go.mod replaces the
# staging modules k8s.io/api, ... by folders of its own repository), so tools/kube-apiserver is a
# module of its own, outside this one's ./..., that pins it and the staging modules at the
# matching v0.x.y (`tool k8s.io/kubernetes/cmd/kube-apiserver`); its go.mod says which version
# and why. Built from the Go module proxy once, and again only when that go.mod or go.sum changes:
# about 6 minutes (660 CPU-seconds) on 2 cores with an empty build cache, the same binary
# each time. The version pinned is stamped into the binary as Kubernetes's own builds do
# (hack/lib/version.sh), so that /version answers it rather than v0.0.0-master.
KUBE_APISERVER_DIR := tools/kube-apiserver
KUBE_APISERVER := bin/kube-apiserver

.PHONY: kube-apiserver
kube-apiserver: $(KUBE_APISERVER) ## Build the real kube-apiserver pinned in tools/kube-apiserver/go.mod into bin/ (from the Go module proxy; for make e2e-kube).

# bin/kube-apiserver links to the one built for tools/kube-apiserver's go.mod and go.sum (their
# checksum names it in TOOLS_CACHE), built there when it is not yet.
KUBE_APISERVER_KEY = $(shell cat $(KUBE_APISERVER_DIR)/go.mod $(KUBE_APISERVER_DIR)/go.sum | cksum | tr ' ' '-')
KUBE_APISERVER_CACHED = $(TOOLS_DIR)/kube-apiserver-$(KUBE_APISERVER_KEY)-$(GO_VERSION)/kube-apiserver

$(KUBE_APISERVER): FORCE
	@$(MAKE) --no-print-directory $(call quote,$(KUBE_APISERVER_CACHED))
	@mkdir -p $(@D)
	@cached=$(call quote,$(KUBE_APISERVER_CACHED)); [ "$$(readlink $@)" = "$$cached" ] || ln -sfn "$$cached" $@

$(TOOLS_DIR)/kube-apiserver-%/kube-apiserver:
	@mkdir -p $(call quote,$(@D))
	@set -euo pipefail; cd $(KUBE_APISERVER_DIR); export GOWORK=off; \
		version=$$($(GO) list -m -f '{{.Version}}' k8s.io/kubernetes); \
		minor=$${version#v*.}; minor=$${minor%%.*}; major=$${version#v}; major=$${major%%.*}; \
		ldflags='-s -w'; for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do \
			ldflags="$$ldflags -X $$pkg.gitVersion=$$version -X $$pkg.gitMajor=$$major -X $$pkg.gitMinor=$$minor"; \
		done; \
		echo "building kube-apiserver $$version from the Go module proxy into $(@D) (once per machine; minutes with a cold build cache)"; \
		CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$$ldflags" -o $(call quote,$@.tmp) k8s.io/kubernetes/cmd/kube-apiserver
	@mv -f $(call quote,$@.tmp) $(call quote,$@)

# The real kube-apiservers of make e2e's Kubernetes upgrade across a removed API
# (TestE2EAKubernetesUpgradeAcrossARemovedAPI): 1.31 to 1.32, the newest upgrade whose API
# removal Talos v1.13 can run. Each is pinned by a module of its own under
# tools/kube-apiserver-upgrade, as tools/kube-apiserver pins bin/kube-apiserver, and built the same
# way, once per machine (about 6 minutes each on 2 cores with an empty build cache).
KUBE_APISERVER_UPGRADE_VERSIONS := 1.31 1.32
KUBE_APISERVER_UPGRADES := $(addprefix bin/kube-apiserver-,$(KUBE_APISERVER_UPGRADE_VERSIONS))

.PHONY: kube-apiserver-upgrades
kube-apiserver-upgrades: $(KUBE_APISERVER_UPGRADES) ## Build the real kube-apiservers of make e2e's Kubernetes upgrade (1.31 and 1.32, pinned in tools/kube-apiserver-upgrade) into bin/.

bin/kube-apiserver-%: FORCE
	@set -euo pipefail; dir=tools/kube-apiserver-upgrade/k8s-$*; \
		key=$$(cat $$dir/go.mod $$dir/go.sum | cksum | tr ' ' '-'); \
		cached=$(TOOLS_DIR)/kube-apiserver-$*-$$key-$(GO_VERSION)/kube-apiserver; \
		[ -x "$$cached" ] || $(MAKE) --no-print-directory KUBE_APISERVER_DIR=$$dir "$$cached"; \
		mkdir -p $(@D); [ "$$(readlink $@)" = "$$cached" ] || ln -sfn "$$cached" $@

# The packages with tests against the real kube-apiserver (files *_e2e_test.go, build tag `e2e`).
# tools/drainparity is a module of its own (client-go and kubectl), tested beside them.
DRAINPARITY_DIR := tools/drainparity
E2E_KUBE_PACKAGES ?= ./internal/kubeapi ./internal/kubeapi/kubeapitest/... ./internal/kubeapi/kubesim ./internal/rollout

.PHONY: e2e-kube
e2e-kube: $(KUBE_APISERVER) ## Hold the Kubernetes fake to the real kube-apiserver (built by make kube-apiserver, with an embedded etcd, on loopback): the kubeapi client's calls answer the same from both; the drain evicts what kubectl drain evicts (tools/drainparity).
	$(GO) mod download github.com/cilium/cilium@v$(E2E_CILIUM) # kubesim registers Cilium's real CRDs as its operator would
	$(GO) mod download github.com/siderolabs/go-kubernetes@v0.2.36 # upstream's removed APIs (internal/rollout)
	$(GO) test -count=1 -tags e2e -v $(E2E_KUBE_PACKAGES)
	@# The drain held to kubectl drain's own code (k8s.io/kubectl/pkg/drain) on the real server: a
	@# module of its own, so that client-go stays out of this one's go.mod (its go.mod says why).
	cd $(DRAINPARITY_DIR) && GOWORK=off $(GO) test -count=1 -tags e2e -v ./...

# The e2e tests that run the program's parts with the real CLI and plugins (../shared/harness)
# against the real kube-apiserver, real charts and the project's fakes. The program refuses
# loopback node addresses, so they run in a network namespace of their own where 10.77.0.0/24 (and
# 10.78-81.0.0/24, the multi-host stack's other hosts) are local (unshare: as root, or in a user
# namespace otherwise).
E2E_CILIUM ?= $(shell sed -n 's/.*DefaultCiliumVersion *= *"\(.*\)"/\1/p' components/talos/args.go)
E2E_RUN ?= E2E
E2E_NETNS ?= $(if $(filter 0,$(shell id -u)),unshare -n,unshare -rn)

.PHONY: e2e
e2e: $(KUBE_APISERVER) $(KUBE_APISERVER_UPGRADES) build ## Run the Proxmox example's program through make (up, upgrade, refusals, a worker removed, backup, both restores, destroy; Secure Boot turned on, every VM replaced in turn, upgraded and restored) and TalosCluster's and its Helm releases' life and Kubernetes upgrade, with the real pulumi CLI and plugins against the Proxmox, Image Factory and Talos fakes, the real kube-apiserver and the real charts, in a network namespace; then the local stack's life against the real Docker daemon: needs ../shared/harness. E2E_RUN=<regexp> picks tests.
	@command -v pulumi >/dev/null || { echo "make e2e: the pulumi CLI is not on PATH (see CONTRIBUTING.md, Integration tests)"; exit 1; }
	@command -v unshare >/dev/null && command -v ip >/dev/null || { echo "make e2e: needs unshare (util-linux) and ip (iproute2)"; exit 1; }
	$(GO) mod download github.com/cilium/cilium@v$(E2E_CILIUM)
	$(GO) test -c -tags e2e -o bin/e2e/talos.test ./components/talos
	$(GO) test -c -tags e2e -o bin/e2e/e2e.test ./tests/e2e
	cd components/talos && E2E_RUN=$(call quote,$(E2E_RUN)) $(E2E_NETNS) sh -c 'ip link set lo up && ip addr add 10.77.0.1/24 dev lo && exec ../../bin/e2e/talos.test -test.run "$$E2E_RUN" -test.v -test.timeout 20m'
	cd tests/e2e && E2E_RUN=$(call quote,$(E2E_RUN)) $(E2E_NETNS) sh -c 'ip link set lo up && for n in 77 78 79 80 81; do ip addr add 10.$$n.0.1/24 dev lo; done && exec ../../bin/e2e/e2e.test -test.run "$$E2E_RUN" -test.v -test.timeout 55m'
	@# Again outside the namespace, for the local stack's life, which needs the Docker daemon's
	@# network (each test skips itself where it cannot run, saying so).
	cd tests/e2e && E2E_RUN=$(call quote,$(E2E_RUN)) sh -c 'exec ../../bin/e2e/e2e.test -test.run "$$E2E_RUN" -test.v -test.timeout 20m'

# The dependencies whose versions decide what the clusters run and how the providers behave.
DEPS_PINNED ?= github.com/pulumi/pulumi/sdk/v3 github.com/muhlba91/pulumi-proxmoxve/sdk/v7 \
	github.com/pulumiverse/pulumi-talos/sdk github.com/pulumi/pulumi-kubernetes/sdk/v4 \
	github.com/pulumi/pulumi-command/sdk github.com/siderolabs/talos/pkg/machinery
# The same for the component provider's own module (provider/go.mod).
DEPS_PINNED_PROVIDER ?= github.com/pulumi/pulumi-go-provider

.PHONY: deps
deps: ## Install the tools make test runs besides Go (dnsmasq, curl, zstd, xz, gzip) with apt-get, through sudo when not root.
	@bash scripts/test-deps.sh install

.PHONY: deps-check
deps-check: ## List the pinned dependencies against the newest the module proxy serves, a new major version included (never fails: drift is shown, not refused).
	@printf '%-46s %-10s %s\n' module pinned 'newest served'
	@for m in $(DEPS_PINNED); do \
	  pinned=$$($(GO) list -m -f '{{.Version}}' "$$m" 2>/dev/null || echo '?'); \
	  newest=$$($(GO) list -m -f '{{.Version}}' "$$m@latest" 2>/dev/null || echo 'not listed by the proxy'); \
	  base=$$(echo "$$m" | sed -E 's#/v[0-9]+$$##'); major=$$(echo "$$m" | sed -nE 's#.*/v([0-9]+)$$#\1#p'); \
	  next=$$(( $${major:-1} + 1 )); \
	  if nv=$$($(GO) list -m -f '{{.Version}}' "$$base/v$$next@latest" 2>/dev/null); then newest="$$nv ($$base/v$$next)"; fi; \
	  printf '%-46s %-10s %s\n' "$$m" "$$pinned" "$$newest"; \
	done
	@for m in $(DEPS_PINNED_PROVIDER); do \
	  pinned=$$($(GO) -C provider list -m -f '{{.Version}}' "$$m" 2>/dev/null || echo '?'); \
	  newest=$$($(GO) -C provider list -m -f '{{.Version}}' "$$m@latest" 2>/dev/null || echo 'not listed by the proxy'); \
	  printf '%-46s %-10s %s\n' "$$m (provider/)" "$$pinned" "$$newest"; \
	done

.PHONY: bench
bench: ## Run the Go benchmarks (program evaluation per node count, ...).
	$(GO) test -run '^$$' -bench . -benchmem ./...

# The packages with goroutines of their own, which make test runs under the race detector: the
# ssh-proxy helper, the Proxmox API client and its fake, the Talos API client (parallel etcd calls)
# and its fake cluster, the Kubernetes client and its fake, the day-2 hooks of TalosCluster
# (futures, parallel reads), the fast stop of Proxmox VMs, the VPS install and probes, the command
# (exec, proxy, the driver's cancellation). The rest of the tree is sequential code under Pulumi's
# mocks: make test runs it without the detector (NORACE_PACKAGES), so every test runs once.
RACE_PACKAGES ?= ./internal/pveapi/... ./internal/talosapi/... ./internal/kubeapi/... ./internal/backupstore/... \
	./components/talos/... ./components/proxmox/... ./components/vps/... ./components/servers/... ./cmd/stackctl/...
# The main module's other packages (evaluated only by the targets that use it).
NORACE_PACKAGES = $(filter-out $(shell $(GO) list $(RACE_PACKAGES)),$(shell $(GO) list ./...))

.PHONY: race
race: ## Run the tests of RACE_PACKAGES under the race detector alone (make test does too; RACE_PACKAGES=./... for all).
	$(GO) test $(TEST_FLAGS) -race $(RACE_PACKAGES)

.PHONY: verify
verify: ## Regenerate what is generated (docs, schema, golden files, URN lists, go.mod) and fail if that changed anything.
	@$(MAKE) --no-print-directory docs schema
	@# The golden files, every -update... flag of a test (tests/verify_test.go checks that each is
	@# here). The directory of rendered patches goes first, so that a file no test writes any more
	@# shows as deleted.
	rm -rf components/talos/testdata/golden
	$(GO) test $(TEST_FLAGS) ./components/talos -update
	$(GO) test $(TEST_FLAGS) ./tests -run 'TestExampleStacksKeepTheir(URNs|Inputs)$$' -update-urns -update-inputs
	$(GO) mod tidy
	cd $(PROVIDER_DIR) && $(GO) mod tidy
	@changed=$$(git status --porcelain) || exit 1; \
		if [ -n "$$changed" ]; then \
			echo "make verify: the checkout differs from what is generated (or has uncommitted changes):" >&2; \
			echo "$$changed" >&2; \
			git --no-pager diff >&2; \
			git ls-files --others --exclude-standard -z | xargs -0 -r -n1 git --no-pager diff --no-index -- /dev/null >&2; \
			echo "make verify: commit the regenerated files if the change is meant, or fix its cause." >&2; \
			exit 1; \
		fi
	@echo "make verify: every generated file is current"

.PHONY: lint
lint: golangci-lint actionlint ## Run golangci-lint (vet's checks and more, on every build tag's files) and actionlint on the GitHub workflows (both pinned; built once per machine from the Go module proxy).
	$(GOLANGCI_LINT) run ./...
	cd $(PROVIDER_DIR) && $(GOLANGCI_LINT) run --config ../.golangci.yml ./...
	$(ACTIONLINT) -shellcheck= .github/workflows/*.yml examples/github-actions/*.yml

.PHONY: tools golangci-lint
tools: golangci-lint actionlint $(KUBE_APISERVER) ## Build the pinned tools (golangci-lint, actionlint, kube-apiserver) now, e.g. beside the tests (CI does).

golangci-lint:
	@$(MAKE) --no-print-directory $(call quote,$(GOLANGCI_LINT))

.PHONY: actionlint
actionlint:
	@$(MAKE) --no-print-directory $(call quote,$(ACTIONLINT))

$(TOOLS_DIR)/actionlint-%/actionlint:
	@echo "building actionlint $(ACTIONLINT_VERSION) into $(@D) (once per machine)"
	@mkdir -p $(call quote,$(@D))
	GOBIN=$(call quote,$(abspath $(@D))/.tmp) $(GO) install github.com/rhysd/actionlint/cmd/actionlint@$(ACTIONLINT_VERSION)
	@mv -f $(call quote,$(@D)/.tmp/actionlint) $(call quote,$@) && rmdir $(call quote,$(@D)/.tmp)

$(TOOLS_DIR)/golangci-lint-%/golangci-lint:
	@echo "building golangci-lint $(GOLANGCI_LINT_VERSION) into $(@D) (once per machine)"
	@mkdir -p $(call quote,$(@D))
	GOBIN=$(call quote,$(abspath $(@D))/.tmp) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
	@mv -f $(call quote,$(@D)/.tmp/golangci-lint) $(call quote,$@) && rmdir $(call quote,$(@D)/.tmp)

.PHONY: schema
schema: ## Regenerate the component package's descriptions (from the doc comments), the part of the kubernetes schema it refers to, the golden schema, and the committed Go SDK (sdk/go/talos-anywhere).
	cd $(PROVIDER_DIR) && $(GO) generate ./talosprovider ./internal/kubeschema && $(GO) test ./talosprovider -run 'TestSchemaIsCurrent|TestDescriptionsAreCurrent' -update -count=1
	cd $(PROVIDER_DIR) && $(GO) test ./internal/sdkgen -run 'TestTheCommittedGoSDKIsCurrent' -update-go-sdk -count=1

.PHONY: provider
provider: $(PROVIDER_BIN) ## Build the component provider (bin/pulumi-resource-talos-anywhere), as `pulumi package add` does.

$(PROVIDER_BIN): $(PROVIDER_INPUTS)
	@mkdir -p $(@D)
	cd $(PROVIDER_DIR) && $(GO) build -buildvcs=auto -ldflags='-s -w' -o $(call quote,$(abspath $@).tmp) . && mv -f $(call quote,$(abspath $@).tmp) $(call quote,$(abspath $@))

.PHONY: release
release: ## Build a release of the component package into RELEASE_DIR (dist/): the plugin for RELEASE_PLATFORMS (linux, darwin, windows; amd64, arm64) as the CLI downloads it, schema.json, the generated SDKs (nodejs, go, python), checksums.txt; only on a commit tagged v<VERSION> (provider/talosprovider/VERSION).
	@set -euo pipefail; version=$$(tr -d ' \n' < $(PROVIDER_VERSION_SOURCE)); \
		case "$$version" in *-dev|"") echo "make release: VERSION is '$$version', a development version: set $(PROVIDER_VERSION_SOURCE) to the release's version (e.g. $${version%-dev}), commit, tag v$${version%-dev}, then make release" >&2; exit 2;; esac; \
		if [ $(call quote,$(RELEASE_TAG)) != "v$$version" ]; then echo "make release: the commit's tag is '"$(call quote,$(RELEASE_TAG))"', not v$$version ($(PROVIDER_VERSION_SOURCE)): tag the commit v$$version" >&2; exit 2; fi; \
		out=$(call quote,$(abspath $(RELEASE_DIR))); mkdir -p "$$out"; \
		for platform in $(RELEASE_PLATFORMS); do \
			os=$${platform%/*}; arch=$${platform#*/}; stage=$$(mktemp -d); exe=$(PROVIDER_NAME); \
			if [ "$$os" = windows ]; then exe=$$exe.exe; fi; \
			echo "building $$os/$$arch"; \
			(cd $(PROVIDER_DIR) && env $(RELEASE_GOENV) GOOS=$$os GOARCH=$$arch $(GO) build $(RELEASE_BUILDFLAGS) -ldflags='-s -w' -o "$$stage/$$exe" .); \
			tar -czf "$$out/$(PROVIDER_NAME)-v$$version-$$os-$$arch.tar.gz" -C "$$stage" "$$exe"; \
			rm -rf "$$stage"; \
		done; \
		(cd $(PROVIDER_DIR) && $(GO) run ./cmd/schema) > "$$out/schema.json"; \
		sdks=$$(mktemp -d); (cd $(PROVIDER_DIR) && $(GO) run ./cmd/sdkgen "$$out/schema.json" "$$sdks"); \
		for language in $$(ls "$$sdks"); do tar -czf "$$out/talos-anywhere-sdk-$$language-v$$version.tar.gz" -C "$$sdks" "$$language"; done; \
		rm -rf "$$sdks"; \
		(cd "$$out" && sha256sum $(PROVIDER_NAME)-v$$version-*.tar.gz talos-anywhere-sdk-*-v$$version.tar.gz schema.json > checksums.txt); \
		ls -l "$$out"

.PHONY: build
build: $(STACKCTL) $(PROGRAM) ## Build bin/stackctl and the program (bin/talos-cluster); the stack targets do it when a source changed.

# Built under a temporary name and renamed, so a running pulumi or stackctl keeps its binary.
# A first build compiles the provider SDKs and takes minutes on a laptop: say so before it starts.
bin/talos-cluster: $(PROGRAM_INPUTS)
	@mkdir -p $(@D)
	@echo "building the program into $@ (minutes the first time, seconds after a change)"
	$(GO) build -o $@.tmp . && mv -f $@.tmp $@

bin/stackctl: $(STACKCTL_INPUTS)
	@mkdir -p $(@D)
	@echo "building stackctl into $@ (minutes the first time, seconds after a change)"
	$(GO) build -o $@.tmp ./cmd/stackctl && mv -f $@.tmp $@

# Written on every run (a moved checkout gets the new path), replaced only when it changed.
.PHONY: FORCE
$(PROJECT_FILE): Pulumi.yaml FORCE
	@mkdir -p $(@D)
	@PROGRAM_PATH=$(call quote,$(abspath $(PROGRAM))) awk ' \
		BEGIN { bin = ENVIRON["PROGRAM_PATH"]; gsub(/\047/, "\047\047", bin); \
			print "# Generated by make from Pulumi.yaml (see the Makefile): the same project, running the prebuilt program." } \
		/^(main|stackConfigDir):/ { print "Pulumi.yaml sets " $$1 " itself: the Makefile cannot point bin/project back at it" > "/dev/stderr"; bad = 1 } \
		/^runtime:/ { if ($$0 !~ /^runtime:[ \t]*go[ \t]*$$/) { print "Pulumi.yaml: expected `runtime: go`, found `" $$0 "`: update the Makefile" > "/dev/stderr"; bad = 1 } \
			print "runtime:\n  name: go\n  options:\n    binary: \047" bin "\047"; runtime = 1; next } \
		{ print } \
		END { if (!runtime && !bad) { print "Pulumi.yaml has no runtime" > "/dev/stderr"; bad = 1 } \
			if (bad) exit 1; print "main: ../.."; print "stackConfigDir: ../.." }' Pulumi.yaml > $@.tmp \
		|| { rm -f $@.tmp; exit 1; }
	@if cmp -s $@.tmp $@; then rm -f $@.tmp; else mv -f $@.tmp $@; fi

.PHONY: fmt
fmt: ## Format the Go code.
	gofmt -w $$(git ls-files '*.go')

.PHONY: docs
docs: ## Regenerate the configuration reference (docs/configuration.md) and the stack file's JSON Schema (docs/stack-file.schema.json) from stacks/types.go.
	$(GO) test ./stacks -run 'TestConfigurationReferenceIsCurrent|TestStackFileSchemaIsCurrent' -update -count=1

.PHONY: fuzz
fuzz: ## Fuzz the stack config loader for FUZZTIME (default 60s).
	$(GO) test ./stacks -run '^$$' -fuzz FuzzLoad -fuzztime $(FUZZTIME)

##@ Stacks (STACK=<name>)

.PHONY: require-stack
require-stack:
	@if [ -z $(call quote,$(STACK)) ]; then echo "STACK is required, e.g. make "$(call quote,$(MAKECMDGOALS))" STACK=proxmox-homelab" >&2; exit 2; fi
	@case $(call quote,$(STACK)) in *[!A-Za-z0-9._-]*) \
		echo "STACK="$(call quote,$(STACK))" is not a stack name: letters, digits, '.', '_' and '-' only" >&2; exit 2;; esac
	@if [ ! -f Pulumi.$(call quote,$(STACK)).yaml ]; then \
		echo "Pulumi."$(call quote,$(STACK))".yaml does not exist: copy an example, e.g. cp Pulumi.proxmox-homelab.yaml.example Pulumi."$(call quote,$(STACK))".yaml" >&2; exit 2; fi
	@case $(call quote,$(PULUMI_BACKEND_URL)) in $(call quote,file://$(LOCAL_BACKEND_DIR))) mkdir -p $(call quote,$(LOCAL_BACKEND_DIR));; esac

.PHONY: init
init: require-stack ## Create (or select) the stack in the backend.
	$(PULUMI) stack select --create --secrets-provider $(call quote,$(SECRETS_PROVIDER)) --stack $(call quote,$(STACK))

.PHONY: adopt
adopt: require-stack $(STACKCTL) ## Take over a running cluster: SECRETS=path/secrets.yaml before the first up; RELEASES="cilium ..." after it.
	@if [ -z $(call quote,$(SECRETS)$(RELEASES)) ]; then echo "SECRETS (or, after the first up, RELEASES) is required, e.g. SECRETS=../ansible/environments/$(STACK)/secrets.yaml" >&2; exit 2; fi
	$(STACKCTL) adopt --stack $(call quote,$(STACK)) --pulumi $(call quote,$(PULUMI)) $(if $(SECRETS),--secrets $(call quote,$(SECRETS))) $(foreach r,$(RELEASES),--release $(call quote,$(r))) $(YES_FLAG) $(ADOPT_FLAGS)

.PHONY: secret
secret: require-stack ## Set a secret config value: make secret STACK=... KEY=proxmox.apiTokenSecret (prompts).
	@if [ -z $(call quote,$(KEY)) ]; then echo "KEY is required, e.g. KEY=proxmox.apiTokenSecret" >&2; exit 2; fi
	$(PULUMI) config set --secret --path --stack $(call quote,$(STACK)) $(call quote,$(KEY))

.PHONY: doctor
doctor: require-stack $(STACKCTL) ## Check from this machine what `up` needs: Proxmox API and token, datastores, VM ids, SSH, route to the VMs; a VPS node's rescue SSH and host key, or its Talos API; a local stack's Docker daemon, image and ports.
	$(STACKCTL) doctor --stack $(call quote,$(STACK)) --pulumi $(call quote,$(PULUMI))

.PHONY: backup
backup: require-stack $(STACKCTL) ## Take an encrypted backup (etcd snapshot, state, stack file) to backup.target, then apply backup.keep (docs/backup.md).
	$(STACKCTL) backup --stack $(call quote,$(STACK)) --pulumi $(call quote,$(PULUMI))

.PHONY: backups
backups: require-stack $(STACKCTL) ## List the stack's backups at backup.target: time, size, Talos and Kubernetes versions, source node.
	$(STACKCTL) backups --stack $(call quote,$(STACK)) --pulumi $(call quote,$(PULUMI))

.PHONY: backup-get
backup-get: $(STACKCTL) ## A backup's files, decrypted and checked, into OUT (new, 0700), without the stack: TARGET=url STACK=name IDENTITY=file OUT=dir [NAME=latest].
	$(STACKCTL) backup-get --target $(call quote,$(TARGET)) --stack $(call quote,$(STACK)) --identity $(call quote,$(IDENTITY)) --out $(call quote,$(OUT)) --name $(call quote,$(or $(NAME),latest))

.PHONY: restore
restore: require-stack $(STACKCTL) ## Bring STACK's cluster back from a backup into new machines: IDENTITY=file (or the key's text in BACKUP_IDENTITY) [NAME=latest]; the stack is made if its state is gone; CONTROL_PLANES=1: the cluster is in place and etcd lost its quorum, only the control planes are reset and recovered (docs/backup.md).
	$(STACKCTL) restore --stack $(call quote,$(STACK)) --create --secrets-provider $(call quote,$(SECRETS_PROVIDER)) --pulumi $(call quote,$(PULUMI)) $(if $(IDENTITY),--identity $(call quote,$(IDENTITY))) --name $(call quote,$(or $(NAME),latest))$(if $(filter 1 y yes true,$(CONTROL_PLANES)), --reset-control-planes)

.PHONY: csi-volume-rm
csi-volume-rm: require-stack $(STACKCTL) ## Delete one volume the Proxmox CSI plugin left on storage.proxmoxCsi.datastore, attached to no VM of the cluster: VOLUME=<datastore>:vm-9999-pvc-... (make doctor lists them; docs/storage.md).
	@if [ -z $(call quote,$(VOLUME)) ]; then echo "VOLUME is required: one that make doctor lists as attached to no VM" >&2; exit 2; fi
	$(STACKCTL) csi-volume-rm --stack $(call quote,$(STACK)) --pulumi $(call quote,$(PULUMI)) --volume $(call quote,$(VOLUME))

.PHONY: gitops-status
gitops-status: require-stack $(STACKCTL) ## Where the root Argo CD Application syncs from, its sync, health and last operation, and each resource not synced or not healthy; exit code 1 unless Synced and Healthy.
	$(WITH_ACCESS) $(STACKCTL) gitops-status --stack $(call quote,$(STACK)) --pulumi $(call quote,$(PULUMI))

.PHONY: restore-drill
restore-drill: ## Back up a cluster of the Talos fake running a real etcd and restore it into fresh fake nodes (etcdutl's restore): the restore's code path, on this machine (also part of make test).
	$(GO) test -count=1 -run 'TestBackupThenRecoverIntoFreshNodes|TestRunRestoresTheClusterFromTheBackup' -v ./cmd/stackctl/internal/backup ./cmd/stackctl/internal/restore

.PHONY: proxy
proxy: require-stack $(STACKCTL) ## Serve the ssh-proxy helper until Ctrl-C and print the export line (for talosctl/kubectl by hand).
	$(STACKCTL) proxy --stack $(call quote,$(STACK)) --pulumi $(call quote,$(PULUMI))

.PHONY: preview
preview: require-stack $(STACKCTL) $(PROGRAM) $(PROJECT_FILE) ## Show what `up` would change (EXPECT_NO_CHANGES=1: fail if anything would).
	$(WITH_ACCESS) $(PULUMI) preview $(IN_PROJECT) --diff $(if $(filter 1 y yes true,$(EXPECT_NO_CHANGES)),--expect-no-changes) --stack $(call quote,$(STACK))

.PHONY: up
up: require-stack $(STACKCTL) $(PROGRAM) $(PROJECT_FILE) ## Create or update the cluster (YES=1: no confirmation prompt).
	$(WITH_ACCESS) $(PULUMI) up $(IN_PROJECT) $(YES_FLAG) --stack $(call quote,$(STACK))

.PHONY: smoke
smoke: ## Bring STACK=local up with the real Talos image (SMOKE_FROM, then the example's release rolled out), check every node Ready on it, Cilium rolled out, a LoadBalancer Service answering on the pool and a preview without changes, destroy it and check nothing is left (needs Docker, network, kubectl).
	@MAKE=$(call quote,$(MAKE)) STACK=$(call quote,$(STACK)) bash scripts/smoke.sh

.PHONY: local
local: ## Bring up the local cluster in Docker from a fresh clone: checks what it needs (Linux, pulumi, Go, Docker), writes Pulumi.local.yaml from its example, init, doctor, up (no prompt), outputs.
	@MAKE=$(call quote,$(MAKE)) bash scripts/local.sh

.PHONY: refresh
refresh: require-stack $(STACKCTL) $(PROGRAM) $(PROJECT_FILE) ## Reconcile the state with reality (YES=1: no confirmation prompt).
	$(WITH_ACCESS) $(PULUMI) refresh $(IN_PROJECT) $(YES_FLAG) --stack $(call quote,$(STACK))

.PHONY: destroy
destroy: require-stack $(STACKCTL) $(PROGRAM) $(PROJECT_FILE) ## Tear the cluster down (runs the program so fast-delete hooks run; YES=1: no prompt).
	@# The program runs only while the stack holds a provider's resource: run on a stack already
	@# destroyed, pulumi 3.259 records the program's components and keeps them (stackctl destroy-flags).
	flags=$$($(PULUMI) stack export $(IN_PROJECT) --stack $(call quote,$(STACK)) | $(STACKCTL) destroy-flags) && \
	TALOS_CLUSTER_DESTROY=1 $(WITH_ACCESS) $(PULUMI) destroy $(IN_PROJECT) $$flags $(YES_FLAG) --stack $(call quote,$(STACK))

.PHONY: pulumi
pulumi: ## Run any pulumi command on this project's backend: make pulumi ARGS='stack ls' (ARGS are split as the shell splits them).
	@case $(call quote,$(PULUMI_BACKEND_URL)) in $(call quote,file://$(LOCAL_BACKEND_DIR))) mkdir -p $(call quote,$(LOCAL_BACKEND_DIR));; esac
	$(PULUMI) $(ARGS)

.PHONY: env
env: ## Print the export line that points a shell's pulumi at this project's backend: eval "$$(make -s env)".
	@printf 'export PULUMI_BACKEND_URL=%q\n' $(call quote,$(PULUMI_BACKEND_URL))

.PHONY: outputs
outputs: require-stack $(STACKCTL) ## Write kubeconfig, talosconfig and each node's machine config (machineconfig/NODE.yaml, for talosctl apply-config without Pulumi) to .access/STACK/ (mode 0600).
	@set -euo pipefail; umask 077; stack=$(call quote,$(STACK)); access=$(call quote,$(ACCESS_DIR)); dir="$$access/$$stack"; \
		mkdir -p "$$dir"; chmod 700 "$$access" "$$dir"; \
		for name in kubeconfig talosconfig; do \
			tmp="$$dir/.$$name.tmp"; \
			if ! $(PULUMI) stack output "$$name" --show-secrets --stack "$$stack" > "$$tmp"; then \
				rm -f "$$tmp"; echo "could not read output $$name of stack $$stack; $$dir/$$name is unchanged" >&2; exit 1; \
			fi; \
			chmod 600 "$$tmp"; mv -f "$$tmp" "$$dir/$$name"; \
		done; \
		echo "wrote $$dir/kubeconfig and $$dir/talosconfig (mode 0600)"; \
		if configs=$$($(PULUMI) stack output machineConfigurations --show-secrets --json --stack "$$stack" 2>/dev/null); then \
			printf '%s\n' "$$configs" | $(STACKCTL) machine-configs --out "$$dir/machineconfig"; \
			echo "wrote $$dir/machineconfig/NODE.yaml, each node's machine config (mode 0600)"; \
		else \
			echo "note: stack $$stack has no machineConfigurations output yet (the next make up adds it); no machine configs written" >&2; \
		fi; \
		case "$$dir" in /*) abs=$$dir;; *) abs=$(call quote,$(CURDIR))/$$dir;; esac; \
		printf 'export KUBECONFIG=%q TALOSCONFIG=%q\n' "$$abs/kubeconfig" "$$abs/talosconfig"
