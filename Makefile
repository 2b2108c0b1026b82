# The two set-up commands: `make run` and `make test` (see README.md).
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
# What running needs, and what testing, linting and benchmarking need on top (the test extra).
RUN_INSTALLED := $(VENV)/.installed-run
INSTALLED := $(VENV)/.installed-test

.PHONY: run test install lint bench

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(RUN_INSTALLED): pyproject.toml | $(VENV)/bin/python
	$(PY) -m pip install --quiet -e .
	touch $@

$(INSTALLED): pyproject.toml | $(VENV)/bin/python
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(RUN_INSTALLED) $@

install: $(INSTALLED)

test: install
	.ci/ensure_chromium.sh
	.ci/test.sh $(PY) $(PYTEST_ARGS)

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports --no-cache --no-logo
	$(PY) manage.py makemigrations --check --dry-run

# Opt-in benchmarks; they print figures and ratios (see docs/performance.md).
bench: install
	.ci/with_postgres.sh $(PY) -m bench.dispatcher
	PG_DURABLE=1 .ci/with_postgres.sh $(PY) -m bench.engine
	PG_DURABLE=1 .ci/with_postgres.sh $(PY) -m bench.fairness
	PG_DURABLE=1 .ci/with_postgres.sh $(PY) -m bench.api
	.ci/with_postgres.sh $(PY) -m bench.operations
	.ci/with_postgres.sh $(PY) -m bench.admin
	PG_DURABLE=1 .ci/with_postgres.sh $(PY) -m bench.batches
	PG_DURABLE=1 .ci/with_postgres.sh $(PY) -m bench.delivery_backlog
	PG_DURABLE=1 .ci/with_postgres.sh $(PY) -m bench.tracing
	PG_DURABLE=1 .ci/with_postgres.sh $(PY) -m bench.archive
	PG_DURABLE=1 .ci/with_postgres.sh $(PY) -m bench.usage
	PG_DURABLE=1 .ci/with_postgres.sh $(PY) -m bench.audit
	BLAST_RADIUS_EXAMPLES=500 .ci/with_postgres.sh $(PY) -m pytest tests/jobtracking/engine/test_blast_radius.py -q

# PORT and SANDBOX_PORT choose the ports (8000, 8765); VERBOSE=1 shows django-q2's task lines.
run: $(RUN_INSTALLED)
	@$(PY) manage.py run_stack --check-ports
	$(PY) manage.py migrate --no-input -v 0
	$(PY) manage.py setup_schedules
	$(PY) manage.py seed_demo
	$(PY) manage.py run_stack $(if $(VERBOSE),--verbose)
