# The two commands of the README: `make run` starts the suite, `make test` runs every check.
# Both create the virtual environment on first use.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PACKAGES := $(wildcard libs/*/pyproject.toml services/*/pyproject.toml tools/*/pyproject.toml)

.PHONY: run test lint typecheck rules browser engine images unit integration e2e bench docs venv clean

venv: $(STAMP)

$(STAMP): requirements-dev.txt $(PACKAGES) tests/support/node_servers/package-lock.json
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# torch first and on its own: pip takes the CPU build from the machine's wheel folder.
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -r requirements-dev.txt
	# Third-party MCP servers from npm that the tests run against (skipped there without node).
	if command -v npm >/dev/null; then npm ci --prefix tests/support/node_servers --no-audit --no-fund --loglevel=error; fi
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/python deploy/local/run_suite.py

test: lint typecheck rules browser engine
	$(BIN)/python -m pytest

# The Prometheus config and alert rules of deploy/observability, checked and unit-tested against recorded
# samples by promtool. CI machines start bare: promtool comes from the Debian package `prometheus`,
# installed when missing.
PROMTOOL ?= promtool
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

rules:
	@command -v $(PROMTOOL) >/dev/null 2>&1 || { \
		echo "promtool is missing: installing the Debian package prometheus"; \
		$(SUDO) apt-get update -qq && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null; }
	$(PROMTOOL) check config deploy/observability/prometheus.yml
	$(PROMTOOL) test rules deploy/observability/alerts_test.yml

# The agent console's browser tests (tests/integration/agent_service/test_console_browser.py) drive Debian's
# Chromium through Playwright (Playwright's own browser download is not used): installed when missing.
CHROMIUM ?= /usr/bin/chromium

browser:
	@test -x $(CHROMIUM) || { \
		echo "Chromium is missing: installing the Debian package chromium"; \
		$(SUDO) apt-get update -qq && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null; }

# A Docker engine for tests/deploy (the suite's images built and run with compose). CI machines start bare:
# Debian's docker.io (Engine 20.10) and debootstrap (for the stand-in base of `make images`) are installed
# when missing and dockerd is started when no engine answers. Where none can run (no root, no cgroups), this
# says so and tests/deploy is skipped with the reason; Compose v2 itself comes from requirements-dev.txt.
DOCKER ?= docker
DOCKERD_LOG ?= .data/dockerd.log

engine:
	@command -v dockerd >/dev/null 2>&1 && command -v debootstrap >/dev/null 2>&1 || { \
		echo "Docker is missing: installing the Debian packages docker.io and debootstrap"; \
		$(SUDO) apt-get update -qq && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
			docker.io debootstrap >/dev/null; } || echo "docker.io could not be installed: tests/deploy will be skipped"
	@$(DOCKER) info >/dev/null 2>&1 || { \
		command -v dockerd >/dev/null 2>&1 && mkdir -p $(dir $(DOCKERD_LOG)) && \
		echo "starting dockerd (log: $(DOCKERD_LOG))" && \
		{ $(SUDO) nohup dockerd >$(DOCKERD_LOG) 2>&1 & } && \
		for i in $$(seq 1 60); do $(DOCKER) info >/dev/null 2>&1 && break; sleep 0.5; done; \
		$(DOCKER) info >/dev/null 2>&1 || echo "dockerd did not start (see $(DOCKERD_LOG)): tests/deploy will be skipped"; }

# The five images (loopsuite/<name>:dev), built offline on stand-ins made from Debian's packages when no
# container registry answers (docs/operations.md, "Air-gapped builds").
images: $(STAMP) engine
	$(BIN)/python deploy/docker/build_images.py

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	$(BIN)/python -m pytest tests/unit

integration: $(STAMP)
	$(BIN)/python -m pytest tests/integration

e2e: $(STAMP)
	$(BIN)/python -m pytest tests/e2e

# Figures, not a gate: what the suite adds to the calls it makes (BENCH_QUICK=1 for a short run,
# BENCH_ARGS="--only agent --profile" to pick benchmarks or record the services with py-spy).
bench: $(STAMP)
	$(BIN)/python -m bench $(BENCH_ARGS)

# The production arm against LangGraph's prebuilt agent with its PostgreSQL checkpointer (bench/production.py,
# docs/performance.md). The peer's packages go into a virtual environment of their own, made here on first use
# from requirements-bench-peers.txt: neither `make bench` nor `make test` needs it.
PEERS_VENV := .data/bench/peers-venv
PEERS_STAMP := $(PEERS_VENV)/.installed

.PHONY: bench-peers
bench-peers: $(STAMP) $(PEERS_STAMP)
	$(BIN)/python -m bench --only peers $(BENCH_ARGS)

$(PEERS_STAMP): requirements-bench-peers.txt
	test -x $(PEERS_VENV)/bin/python || $(PYTHON) -m venv $(PEERS_VENV)
	$(PEERS_VENV)/bin/python -m pip install --quiet -r requirements-bench-peers.txt
	touch $(PEERS_STAMP)

# docs/configuration.md is written from the settings classes' own descriptions (a test fails when it is stale).
docs: $(STAMP)
	$(BIN)/python docs/generate_configuration.py

clean:
	rm -rf $(VENV) .data .mypy_cache .ruff_cache .import_linter_cache .grimp_cache
