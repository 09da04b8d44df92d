# local_knowledge_trainer: `make demo` and `make test` do everything on a fresh machine.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
BIN := $(VENV)/bin
STAMP := $(VENV)/.lkt-installed
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false
export ANONYMIZED_TELEMETRY := False
export MPLBACKEND := Agg

.PHONY: setup test test-slow demo export clean-nbs check-sync bench docs docs-deps help
CHROMIUM ?= /usr/bin/chromium

help:
	@echo "make demo   - set up .venv and run LKT on the bundled sample corpus"
	@echo "make test   - set up .venv and run every test (sync check, notebooks, pytest) but the slow ones"
	@echo "make test-slow - the slow tests: pytest tests marked slow, then the notebooks with their #| slow cells"
	@echo "make bench  - run the benchmark scripts in bench/ (JSON on stdout; bench/startup.py: CLI start-up)"
	@echo "make docs   - build the offline documentation site into _site/"

# torch first (the local CPU wheel), then everything else constrained to it so no CUDA build is pulled.
$(STAMP): settings.ini setup.py constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip wheel setuptools
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -c constraints.txt -e ".[dev]"
	-git rev-parse --git-dir >/dev/null 2>&1 && git config merge.nbdev-merge.name "resolve notebook conflicts with nbdev_merge" \
	  && git config merge.nbdev-merge.driver "$(abspath $(BIN))/nbdev_merge %O %A %B %P"
	touch $(STAMP)

setup: $(STAMP)

export: setup
	$(BIN)/nbdev_export

clean-nbs: setup
	$(BIN)/nbdev_clean
	$(BIN)/nbdev_clean --fname evals

# nbdev_clean and nbdev_export must not change anything: the notebooks are the source of truth.
check-sync: setup
	PATH=$(BIN):$$PATH bash .ci/check_sync.sh

# tests/test_layers.py first (import layers, light imports), then each notebook in nbs/ and evals/ executed ONCE as one
# pytest case (tests/test_notebooks.py, nbdev_test semantics, outputs kept in build/executed/), then the docs site
# built from those executed copies without executing anything again (tests/test_docs.py). Tests marked `slow` (minutes
# each: the kill loop, big simulations) and the notebooks' `#| slow` cells are left out: `make test-slow` runs them.
test: setup check-sync docs-deps
	$(PY) -m pytest tests -v -p no:cacheprovider -m "not slow" --durations=25

# The slow parts, CI's separate target: the pytest tests marked `slow`, then every notebook with its `#| slow` cells
# (LKT_SLOW=1; the executed copies in build/executed/ then include them).
test-slow: setup
	$(PY) -m pytest tests -v -p no:cacheprovider -m slow
	LKT_SLOW=1 $(PY) -m pytest tests/test_notebooks.py -v -p no:cacheprovider

demo: setup
	$(BIN)/lkt demo --corpus evals/sample_corpus

bench: setup
	$(PY) bench/run_all.py

# Debian's Chromium for the browser checks in tests/test_docs.py; skipped when already installed.
docs-deps:
	@test -x $(CHROMIUM) || { S=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	  $$S apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$S apt-get install -y -qq chromium; }

# The offline docs site (Sphinx + myst-nb over nbdev-processed notebooks) into _site/. It renders build/executed/
# (left by `make test`) and executes only the notebooks whose copy is missing or out of date.
docs: setup
	$(PY) nbs/_docs/build.py
