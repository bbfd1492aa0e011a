# Self-Attention from Scratch: set-up, build, test.
#   make book   - set up .venv and build the site into _build/html
#   make test   - set up .venv, build the site, run the unit, chapter (nbval) and browser tests
#   make lab    - open JupyterLab on chapters/
#   make execute - re-run every chapter top to bottom and save its outputs

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

# Put the venv first, so that Jupyter kernels started from here run its Python.
export PATH := $(CURDIR)/$(BIN):$(PATH)

.PHONY: help install site book test test-stable lab execute bench clean

help:
	@sed -n '2,5p' Makefile | sed 's/^# *//'

$(STAMP): requirements.txt constraints.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -r requirements.txt
	touch $@

install: $(STAMP)

# --all: a full build takes seconds, and an incremental one can keep stale static files.
site: $(STAMP)
	$(BIN)/jupyter-book build . -W -n --keep-going --all
	$(BIN)/python scripts/check_site.py _build/html

book: site

# The browser tests (tests/test_site.py) need the built site.
test: site
	$(BIN)/python -m pytest

# The chapters' outputs must not depend on the run or the thread count.
test-stable: $(STAMP)
	$(BIN)/python -m pytest chapters
	OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $(BIN)/python -m pytest chapters

# Jupyter refuses to run as root unless told to; containers often run as root.
LAB_ARGS ?= $(if $(filter 0,$(shell id -u)),--allow-root)

lab: $(STAMP)
	$(BIN)/jupyter lab --notebook-dir=chapters $(LAB_ARGS)

execute: $(STAMP)
	$(BIN)/python scripts/execute_chapters.py chapters/*.ipynb

# Not part of make test: a few minutes, about 10 GB of memory. Table, bench.json and bench.png.
bench: $(STAMP)
	$(BIN)/python benchmarks/bench_attention.py --out _build/bench

clean:
	rm -rf _build
