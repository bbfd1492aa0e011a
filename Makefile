# Self-Attention from Scratch: set-up, build, test. `make help` lists the targets.
# Every target creates .venv and installs requirements.txt on first use.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

# Put the venv first, so that Jupyter kernels started from here run its Python.
export PATH := $(CURDIR)/$(BIN):$(PATH)

.PHONY: help install site book test unit lint test-stable lab execute bench clean
.DEFAULT_GOAL := help

help: ## list the targets (this text)
	@echo "Self-Attention from Scratch. Targets:"
	@awk 'BEGIN {FS = ":[^#]*## "} /^[a-z-]+:.*## / {printf "  make %-12s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

$(STAMP): requirements.txt constraints.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -r requirements.txt
	touch $@

install: $(STAMP) ## create .venv and install the pinned requirements (the other targets do it too)

# --all: a full build takes seconds, and an incremental one can keep stale static files.
site: $(STAMP) ## build the site into _build/html (warnings are errors), shrink its figures, check it loads nothing remote
	$(BIN)/jupyter-book build . -W -n --keep-going --all
	$(BIN)/python scripts/optimize_images.py _build/html
	$(BIN)/python scripts/check_site.py _build/html

book: site ## the same as site

# The browser tests (tests/test_site.py) need the built site. Each chapter runs once, under nbval.
test: site ## build the site, then every test: unit, the chapters under strict nbval, the site in a browser
	$(BIN)/python -m pytest

# No notebooks (nbval off) and no browser: the quick loop while editing the package.
unit: $(STAMP) ## the package's own tests only, in seconds
	$(BIN)/python -m pytest tests --ignore=tests/test_site.py -o addopts="-p no:cacheprovider" -q

lint: $(STAMP) ## ruff check and ruff format --check (settings in pyproject.toml)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# The chapters' outputs must not depend on the run or the thread count.
test-stable: $(STAMP) ## re-run the chapters under nbval twice: again, then on one thread
	$(BIN)/python -m pytest chapters
	OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $(BIN)/python -m pytest chapters

# Jupyter refuses to run as root unless told to; containers often run as root.
LAB_ARGS ?= $(if $(filter 0,$(shell id -u)),--allow-root)

lab: $(STAMP) ## open JupyterLab on chapters/
	$(BIN)/jupyter lab --notebook-dir=chapters $(LAB_ARGS)

execute: $(STAMP) ## re-run every chapter top to bottom and save its outputs
	$(BIN)/python scripts/execute_chapters.py chapters/*.ipynb

# Not part of make test: a few minutes, about 10 GB of memory.
bench: $(STAMP) ## time and memory of the attention implementations: table, bench.json, bench.png
	$(BIN)/python benchmarks/bench_attention.py --out _build/bench

clean: ## remove _build
	rm -rf _build
