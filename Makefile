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
# The operator tools (doctor, the ssh-proxy helper). `exec` runs a pulumi command with the helper
# around it when the stack has proxmox.access: ssh-proxy, and runs it unchanged otherwise.
STACKCTL ?= $(GO) run ./cmd/stackctl
WITH_ACCESS = $(STACKCTL) exec --stack $(STACK) --pulumi $(PULUMI) --

##@ Development

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"; printf "Usage: make <target> [STACK=<stack>]\n"} \
		/^[a-zA-Z_-]+:.*?##/ { printf "  \033[36m%-10s\033[0m %s\n", $$1, $$2 } \
		/^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) }' $(MAKEFILE_LIST)

.PHONY: test
test: ## Run every test (formatting, vet, unit, mocks, fuzz seed corpora). What CI runs.
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
		if [ -n "$$unformatted" ]; then echo "gofmt needed: $$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(GO) test -count=1 ./...
	@# The Automation API integration test: runs where pulumi is on PATH, says SKIPPED otherwise.
	@set -o pipefail; $(GO) test -count=1 -tags integration -run Integration -v ./internal/driver ./internal/stackctl | grep -E '^(--- |ok|FAIL|PASS)|SKIPPED'
	@# Every benchmark once, so they keep compiling and passing; `make bench` measures.
	$(GO) test -count=1 -run '^$$' -bench . -benchtime 1x ./... > /dev/null

.PHONY: integration
integration: ## Run the integration tests with the real pulumi CLI (Automation API driver, adopt; needs pulumi on PATH).
	$(GO) test -count=1 -tags integration -run Integration -v ./internal/driver ./internal/stackctl

.PHONY: bench
bench: ## Run the Go benchmarks (program evaluation per node count, ...).
	$(GO) test -run '^$$' -bench . -benchmem ./...

.PHONY: lint
lint: ## Run golangci-lint (pinned; built with the Go module proxy on first use).
	$(GO) run github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION) run ./...

.PHONY: fmt
fmt: ## Format the Go code.
	gofmt -w $$(git ls-files '*.go')

.PHONY: docs
docs: ## Regenerate the README's configuration reference from stacks/types.go.
	$(GO) test ./stacks -run TestReadmeReferenceIsCurrent -update -count=1

.PHONY: fuzz
fuzz: ## Fuzz the stack config loader for FUZZTIME (default 60s).
	$(GO) test ./stacks -run '^$$' -fuzz FuzzLoad -fuzztime $(FUZZTIME)

##@ Stacks (STACK=<name>)

.PHONY: require-stack
require-stack:
	@if [ -z "$(STACK)" ]; then echo "STACK is required, e.g. make $(MAKECMDGOALS) STACK=proxmox-homelab" >&2; exit 2; fi
	@if [ ! -f "Pulumi.$(STACK).yaml" ]; then \
		echo "Pulumi.$(STACK).yaml does not exist: copy an example, e.g. cp Pulumi.proxmox-homelab.yaml.example Pulumi.$(STACK).yaml" >&2; exit 2; fi
	@case "$(PULUMI_BACKEND_URL)" in file://$(LOCAL_BACKEND_DIR)) mkdir -p "$(LOCAL_BACKEND_DIR)";; esac

.PHONY: init
init: require-stack ## Create (or select) the stack in the backend.
	$(PULUMI) stack select --create --secrets-provider $(SECRETS_PROVIDER) --stack $(STACK)

.PHONY: adopt
adopt: require-stack ## Take over a running cluster: SECRETS=path/secrets.yaml before the first up; RELEASES="cilium ..." after it.
	@if [ -z "$(SECRETS)$(RELEASES)" ]; then echo "SECRETS (or, after the first up, RELEASES) is required, e.g. SECRETS=../ansible/environments/$(STACK)/secrets.yaml" >&2; exit 2; fi
	$(STACKCTL) adopt --stack $(STACK) --pulumi $(PULUMI) $(if $(SECRETS),--secrets '$(SECRETS)') $(foreach r,$(RELEASES),--release $(r)) $(ADOPT_FLAGS)

.PHONY: secret
secret: require-stack ## Set a secret config value: make secret STACK=... KEY=proxmox.apiTokenSecret (prompts).
	@if [ -z "$(KEY)" ]; then echo "KEY is required, e.g. KEY=proxmox.apiTokenSecret" >&2; exit 2; fi
	$(PULUMI) config set --secret --path --stack $(STACK) '$(KEY)'

.PHONY: doctor
doctor: require-stack ## Check from this machine what `up` needs: Proxmox API and token, datastores, VM ids, SSH, route to the VMs.
	$(STACKCTL) doctor --stack $(STACK) --pulumi $(PULUMI)

.PHONY: proxy
proxy: require-stack ## Serve the ssh-proxy helper until Ctrl-C and print the export line (for talosctl/kubectl by hand).
	$(STACKCTL) proxy --stack $(STACK) --pulumi $(PULUMI)

.PHONY: preview
preview: require-stack ## Show what `up` would change.
	$(WITH_ACCESS) $(PULUMI) preview --diff --stack $(STACK)

.PHONY: up
up: require-stack ## Create or update the cluster.
	$(WITH_ACCESS) $(PULUMI) up --stack $(STACK)

.PHONY: refresh
refresh: require-stack ## Reconcile the state with reality.
	$(WITH_ACCESS) $(PULUMI) refresh --stack $(STACK)

.PHONY: destroy
destroy: require-stack ## Tear the cluster down (runs the program so fast-delete hooks run).
	$(WITH_ACCESS) $(PULUMI) destroy --run-program --stack $(STACK)

.PHONY: outputs
outputs: require-stack ## Write kubeconfig and talosconfig to .access/STACK/ (mode 0600).
	@set -euo pipefail; umask 077; dir="$(ACCESS_DIR)/$(STACK)"; \
		mkdir -p "$$dir"; chmod 700 "$(ACCESS_DIR)" "$$dir"; \
		for name in kubeconfig talosconfig; do \
			tmp="$$dir/.$$name.tmp"; \
			if ! $(PULUMI) stack output "$$name" --show-secrets --stack "$(STACK)" > "$$tmp"; then \
				rm -f "$$tmp"; echo "could not read output $$name of stack $(STACK); $$dir/$$name is unchanged" >&2; exit 1; \
			fi; \
			chmod 600 "$$tmp"; mv -f "$$tmp" "$$dir/$$name"; \
		done; \
		echo "wrote $$dir/kubeconfig and $$dir/talosconfig (mode 0600)"; \
		echo "export KUBECONFIG=$(CURDIR)/$$dir/kubeconfig TALOSCONFIG=$(CURDIR)/$$dir/talosconfig"
