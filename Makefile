# Everything a fresh machine needs: `make example` runs the main example,
# `make test` runs the whole test suite (what CI runs).
VENV ?= .venv
PYTHON ?= python3
STAMP := $(VENV)/.installed
COMPILED := $(VENV)/.compiled
HOT_PATH := squall/model/tuple.py squall/model/tuple.pxd squall/model/groupings.py squall/model/hashing.py \
	squall/model/attempt.py \
	squall/model/_keyhash.pyx \
	squall/spark/collectors.py squall/spark/collectors.pxd squall/spark/_atomic.pyx squall/reliability/_xor_fold.pyx \
	squall/reliability/_acker_merge.pyx \
	squall/spark/execution.py squall/spark/execution.pxd \
	squall/spark/spouts.py squall/spark/load.py \
	squall/connectors/kafka/spout.py \
	squall/connectors/kafka/offsets.py

.PHONY: example demo test lint bench setup peers

setup: $(COMPILED)

$(STAMP): pyproject.toml scripts/ensure-system-packages.sh scripts/ensure-kafka.sh scripts/kafka/pom.xml
	bash scripts/ensure-system-packages.sh
	bash scripts/ensure-kafka.sh
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[test]'
	touch $@

# The per-tuple modules, compiled in place by Cython (setup.py); rebuilt when their sources change.
$(COMPILED): $(STAMP) $(HOT_PATH) setup.py
	$(VENV)/bin/python setup.py -q build_ext --inplace
	touch $@

example: $(COMPILED)
	$(VENV)/bin/squall run examples/word_count.py

demo: $(COMPILED)
	$(VENV)/bin/squall demo

lint: $(COMPILED)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check squall tests benchmarks examples
	$(VENV)/bin/lint-imports

test: lint
	$(VENV)/bin/python -m pytest

bench: $(COMPILED)
	$(VENV)/bin/python benchmarks/acker.py
	$(VENV)/bin/python benchmarks/word_count.py
	$(VENV)/bin/python benchmarks/pipelining.py
	$(VENV)/bin/python benchmarks/sources.py

# squall's peers (Apache Storm, Bytewax) on the same word count: not part of setup or test; see
# benchmarks/peers/README.md. PEERS_ARGS passes options, e.g. PEERS_ARGS='--only storm --sweep 250,5000'.
peers: $(COMPILED)
	bash benchmarks/peers/setup.sh
	$(VENV)/bin/python benchmarks/peers/run.py $(PEERS_ARGS)
