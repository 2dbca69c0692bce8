# The two commands of the README, each installing what it needs into .venv by itself.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

# Tests run in parallel (pytest-xdist), JOBS workers, each with a PostgreSQL server of its own:
# two per core, since the end-to-end tests spend most of their time waiting on processes and
# timers (on 2 cores the whole suite takes 9-10 minutes with 4).
JOBS ?= $(shell echo $$(( $$(nproc) * 2 )))
# With -n, pytest-xdist hands the tests out one by one in the order the tiers plugin sorts them
# (the long ones first): no test shares a worker with another on purpose.
PYTEST := $(BIN)/pytest
# The unit and database tiers wait on little but their own CPU: three workers on two cores ran
# them in 67-77 s, four in 80-82 s, two in 83 s.
CHECK_JOBS ?= $(shell echo $$(( $$(nproc) * 3 / 2 )))

.PHONY: demo check test unit lint typecheck bench bench-peers clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/reminders demo

# The test tiers, a folder each: the outbox's and the vazifalar domain's tests.
UNIT := tests/unit reminders/tests/unit
DB := tests/db reminders/tests/db

# The everyday loop: lint, types, the unit and database tiers.
check: $(STAMP) lint typecheck
	$(PYTEST) -n $(CHECK_JOBS) $(UNIT) $(DB)

# The whole suite: lint, types, every tier (end-to-end too: processes, kill -9, Alembic,
# PgBouncer, a browser). Before a push, and in CI.
test: $(STAMP) lint typecheck
	$(PYTEST) -n $(JOBS)

# The tests that need no database, in seconds.
unit: $(STAMP)
	$(BIN)/pytest $(UNIT)

lint: $(STAMP)
	$(BIN)/ruff check outbox outbox_testing reminders migrations tests bench examples deploy conftest.py
	$(BIN)/ruff format --check outbox outbox_testing reminders migrations tests bench examples deploy conftest.py

typecheck: $(STAMP)
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/python -m bench

bench-peers: $(STAMP)
	$(BIN)/pip install --quiet 'procrastinate>=3' 'pgqueuer>=0.20'
	$(BIN)/python -m bench --peers

clean:
	rm -rf $(VENV) .outbox
