# Everything a fresh machine needs: `make example` runs the main example,
# `make test` runs the whole test suite (what CI runs).
VENV ?= .venv
PYTHON ?= python3
STAMP := $(VENV)/.installed

.PHONY: example demo test lint bench setup

setup: $(STAMP)

$(STAMP): pyproject.toml scripts/ensure-system-packages.sh
	bash scripts/ensure-system-packages.sh
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[test]'
	touch $@

example: $(STAMP)
	$(VENV)/bin/squall run examples/word_count.py

demo: $(STAMP)
	$(VENV)/bin/squall demo

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check squall tests benchmarks examples

test: lint
	$(VENV)/bin/python -m pytest

bench: $(STAMP)
	$(VENV)/bin/python benchmarks/acker.py
	$(VENV)/bin/python benchmarks/word_count.py
	$(VENV)/bin/python benchmarks/pipelining.py
	$(VENV)/bin/python benchmarks/sources.py
