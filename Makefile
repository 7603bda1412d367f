# Developer and CI entry points. `make test` is what CI runs (via .ci/run): lint, types, layering,
# then the tests; every step must pass.

# python3.11 when there is one (the oldest version we support), else python3.
PYTHON ?= $(shell command -v python3.11 2>/dev/null || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.stamp
RUN_STAMP := $(VENV)/.stamp-run
PG_STAMP := $(VENV)/.stamp-postgres

.PHONY: venv venv-run test lint docs bench peers run run-postgres

venv: $(STAMP)

# What running needs and nothing more (OPS-12): the package, its runtime dependencies and what the
# example needs (the demo extra: its loopback DNS server; the console extra: the web console it
# starts), not the development tools (mypy, ruff, hypothesis, prometheus-client, the test-only
# servers).
venv-run: $(RUN_STAMP)

# Each stamp is newer than pyproject.toml once an install from it succeeded, so an install runs
# again only when the dependencies may have changed. The development install includes the runtime
# one, so it sets both stamps.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP) $(RUN_STAMP)

$(RUN_STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -e '.[demo,console]'
	touch $(RUN_STAMP)

$(PG_STAMP): pyproject.toml $(RUN_STAMP)
	$(BIN)/python -m pip install --quiet -e '.[demo,console,postgres]'
	touch $(PG_STAMP)

lint: venv
	$(BIN)/ruff check src tests examples docs/hooks bench/peers
	$(BIN)/mypy
	$(BIN)/lint-imports

# The docs site, built the way `make test` checks it: any warning (a broken link, a missing page) fails.
docs: venv
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

# The suite in TEST_WORKERS processes (pytest-xdist, ADR 0024): its tests wait on servers, disks
# and other processes much of the time, so the second core does the other worker's tests meanwhile
# (a fresh clone's `make test` took 8-10 minutes, 14-14.5 in one process). `make test
# TEST_WORKERS=0` runs it in one process.
TEST_WORKERS ?= 2

test: lint docs
	$(BIN)/pytest -q -n $(TEST_WORKERS)

bench: venv
	$(BIN)/mailbox-actors bench --quick

# The same burst, cold-object and start workloads on workerd and Miniflare beside ours (issue 28), 3 alternating
# rounds: installs the pinned peers with npm into ~/.cache/mailbox-actors-peers (outside the
# repository) on first use. docs/performance/benchmark.md says what it measures.
peers: venv
	$(BIN)/python bench/peers/peers.py

run: venv-run
	$(BIN)/python examples/run_cluster.py

# The same cluster and traffic with the control data and queues in PostgreSQL (CL-7): a server of
# this machine's binaries (/usr/lib/postgresql/*/bin) started for the run and stopped on exit.
run-postgres: $(PG_STAMP)
	$(BIN)/python examples/run_cluster.py --postgres local
