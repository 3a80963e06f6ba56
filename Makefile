# TrainHub: `make demo` brings it up, `make test` runs every test.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PORT ?= 8000
STAMP := $(VENV)/.installed-stamp
DEV_STAMP := $(VENV)/.dev-stamp
TORCH_STAMP := $(VENV)/.torch-stamp
BUNDLE := frontend/dist/trainhub/pages/job.js
UV := $(VENV)/bin/uv pip install --quiet --python $(PY)

.PHONY: demo test cluster faults screenshots install dev frontend sandbox test-tools lock lint docs docs-reference audit typecheck proto clean

# Two distributions from one repository: trainhub-runtime (the root pyproject.toml: the
# runtime and the node agent) and trainhub (platform/pyproject.toml: the control plane).
# What running needs only (make demo); uv installs it (a runtime dependency anyway: the
# agent builds job environments with it), in parallel, in a fraction of pip's time.
# Every third-party package comes from a lock file with its hashes (requirements/*.lock,
# written by `make lock`); then TrainHub's own two packages, without dependencies.
$(STAMP): pyproject.toml platform/pyproject.toml requirements/uv.lock requirements/server.lock
	@echo "make: installing TrainHub into $(VENV) (what running needs)"
	@$(PYTHON) -m venv $(VENV)
	@$(PY) -m pip install -qq --require-hashes -r requirements/uv.lock
	@$(UV) --require-hashes -r requirements/server.lock
	@$(UV) --no-deps -e . -e ./platform
	@touch $@

# The test and lint toolchain (Playwright, mypy, schemathesis…): make test and make lint.
$(DEV_STAMP): $(STAMP) requirements/dev.lock
	@echo "make: installing the test and lint toolchain into $(VENV)"
	@$(UV) --require-hashes -r requirements/dev.lock
	@$(UV) --no-deps -e . -e "./platform[dev]"
	@touch $@

# Pin every dependency of the two pyprojects, with hashes, at today's newest releases
# that their ranges allow (uv pip compile); commit the result. tests/test_lockfiles.py
# fails while a pyproject names a package or a range that its lock does not satisfy.
LOCK := $(VENV)/bin/uv pip compile --quiet --generate-hashes --python-version 3.11
lock: $(STAMP)
	$(LOCK) --no-emit-package trainhub --no-emit-package trainhub-runtime \
	  requirements/server.in -o requirements/server.lock
	$(LOCK) --no-emit-package trainhub --no-emit-package trainhub-runtime \
	  -c requirements/server.lock requirements/dev.in -o requirements/dev.lock
	$(LOCK) -c requirements/server.lock requirements/uv.in -o requirements/uv.lock

# The runtime's `torch` extra, for the tests and the type checks of ps_runtime.pytorch and
# the examples (the demo needs none: a job asks its nodes for torch in its environment).
# Pinned: unpinned, pip may pick a multi-GB CUDA build where this version's CPU wheel is
# at hand.
$(TORCH_STAMP): $(DEV_STAMP)
	$(PY) -m pip install --quiet -e ".[torch]" "torch==2.13.0"
	touch $@

$(BUNDLE): frontend/package.json frontend/package-lock.json $(shell find frontend/src -type f)
	@echo "make: building the browser bundle (frontend/dist)"
	@cd frontend && npm ci --no-audit --no-fund --loglevel=error >/dev/null && npm run --silent build

install: $(STAMP) $(BUNDLE)

dev: install $(DEV_STAMP)

frontend: $(BUNDLE)

## bubblewrap, the sandbox the agent runs every task in (Debian's `bubblewrap`): installed
## here when missing and we are root, else what to install is said (the agent then starts
## no task)
sandbox:
	@command -v bwrap >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing bubblewrap (the task sandbox)"; \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null 2>&1 || \
	    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null; }; \
	  else \
	    echo "make: bubblewrap is missing: install it (Debian/Ubuntu: sudo apt-get install bubblewrap); until then the local agent starts no job" >&2; \
	  fi; }

## What the tests drive besides Python: Debian's chromium (browser tests), prometheus (a
## real scrape of /metrics), docker-compose (the compose file checked against the
## Compose Specification) and nginx (the production-like cluster, tests/cluster);
## installed here when missing and we are root, else named
TEST_TOOLS := chromium prometheus docker-compose nginx
test-tools:
	@missing=""; for tool in $(TEST_TOOLS); do \
	  command -v "$$tool" >/dev/null 2>&1 || missing="$$missing $$tool"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing the test tools:$$missing"; \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null 2>&1 || \
	    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; }; \
	  else \
	    echo "make: the tests need Debian's$$missing: sudo apt-get install$$missing" >&2; exit 1; \
	  fi; \
	fi

## Start TrainHub standalone (SQLite, embedded broker, a local agent) on http://127.0.0.1:$(PORT)/
demo:
	@$(MAKE) --no-print-directory -j3 install sandbox
	$(VENV)/bin/trainhub standalone --port $(PORT)

## Run the whole test suite (needs PostgreSQL and Redis; see README "Tests")
test: export DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/test
test: export TEST_REDIS_URL ?= redis://127.0.0.1:6379/15
test: dev sandbox test-tools $(TORCH_STAMP)
	cd frontend && npm test --silent
	$(PY) -m pytest --ignore=tests/faults --durations=25 $(PYTEST_ARGS)

## Rewrite the README's screenshots (docs/screenshots/) from the browser tests; a plain
## test run writes none
screenshots: export DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/test
screenshots: export TEST_REDIS_URL ?= redis://127.0.0.1:6379/15
screenshots: export TRAINHUB_SCREENSHOTS = 1
screenshots: dev sandbox
	$(PY) -m pytest tests/e2e/web $(PYTEST_ARGS)

## A production-like cluster on this machine until Ctrl-C (tests/cluster/harness.py):
## private PostgreSQL and Redis, deploy/nginx.conf (TLS) in front of 2 web processes,
## 2 Celery workers, beat and 3 agents installed by the one-liner on 127.0.0.2-4 (root)
cluster: dev sandbox test-tools
	$(PY) -m tests.cluster

## The fault suite: one fault per case on a services-mode cluster of its own (PostgreSQL
## and Redis instances it starts itself); prints each case's recovery time
faults: dev sandbox
	$(PY) -m pytest tests/faults --durations=0 $(PYTEST_ARGS)

## Every gate fails the build: style, formatting, layering (import-linter) and types
lint: $(DEV_STAMP) $(TORCH_STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy

## The documentation site (mkdocs.yml, docs/) into site/ (git-ignored); --strict fails on
## any warning: a broken link or anchor, a page missing from the nav. mkdocs-material comes
## with the dev lock.
docs: export NO_MKDOCS_2_WARNING = 1
docs: $(DEV_STAMP)
	$(VENV)/bin/mkdocs build --strict

## Rewrite docs/reference/jobspec.md from the job spec's serializers (tests fail until the
## committed page matches them)
docs-reference: $(STAMP)
	$(PY) -m trainhub.jobs.specreference docs/reference/jobspec.md

## Known-vulnerable dependencies: every installed package checked against PyPI's advisories;
## --strict fails when a package cannot be checked (e.g. PyPI's JSON API is unreachable)
audit: $(DEV_STAMP)
	$(VENV)/bin/pip-audit --strict --progress-spinner off

typecheck: $(DEV_STAMP)
	$(VENV)/bin/mypy

proto:
	$(PY) -m ps_runtime.proto.codegen

clean:
	rm -rf $(VENV) frontend/node_modules frontend/dist .pytest_cache .mypy_cache
