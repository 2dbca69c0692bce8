# The two commands of the README, each installing what it needs into .venv by itself.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck bench bench-peers clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/reminders demo

test: $(STAMP) lint typecheck
	$(BIN)/pytest

lint: $(STAMP)
	$(BIN)/ruff check outbox outbox_testing reminders migrations tests bench examples
	$(BIN)/ruff format --check outbox outbox_testing reminders migrations tests bench examples

typecheck: $(STAMP)
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/python -m bench

bench-peers: $(STAMP)
	$(BIN)/pip install --quiet 'procrastinate>=3' 'pgqueuer>=0.20'
	$(BIN)/python -m bench --peers

clean:
	rm -rf $(VENV) .outbox
