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

$(STAMP): requirements.txt requirements-nodeps.txt constraints.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -r requirements.txt
	$(BIN)/python -m pip install --quiet --no-deps -r requirements-nodeps.txt
	touch $@

# MathJax for the build (book/_ext/static_math.py typesets the maths under Node.js), pinned by
# package-lock.json. --ignore-scripts: no package's install script runs.
NODE_STAMP := node_modules/.installed
$(NODE_STAMP): package.json package-lock.json
	npm ci --ignore-scripts --no-audit --no-fund
	touch $@

install: $(STAMP) $(NODE_STAMP) ## create .venv and node_modules with the pinned requirements (other targets do it too)

# --all: a full build takes seconds, and an incremental one can keep stale static files.
site: $(STAMP) $(NODE_STAMP) ## build the site into _build/html (warnings are errors), shrink its figures, check it loads nothing remote
	$(BIN)/jupyter-book build . -W -n --keep-going --all
	$(BIN)/python scripts/optimize_images.py _build/html
	$(BIN)/python scripts/check_site.py _build/html

book: site ## the same as site

# The browser tests (tests/test_site.py) need the built site. Each chapter runs once, under nbval.
test: site ## build the site, then every test: unit, the chapters under strict nbval, the site in a browser
	$(BIN)/python -m pytest

# The quick loop while editing the package: no notebooks, no browser, no test marked slow (reference
# libraries, the real MiniLM, retraining), Hypothesis's "unit" profile (50 cases, not 200), and one thread:
# small arrays gain nothing from a second, and a thread that waits for a busy core stalls a whole test.
unit: $(STAMP) ## the package's own fast tests (not nbval, the browser or the slow ones), in under 30 s
	OMP_NUM_THREADS=1 HYPOTHESIS_PROFILE=unit $(BIN)/python -m pytest tests --ignore=tests/test_site.py -m "not slow" \
		-o addopts="" -p no:cacheprovider -p no:nbval -p no:logging -q

lint: $(STAMP) ## ruff check and ruff format --check (settings in pyproject.toml)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# The chapters' outputs must not depend on the thread count or the CPU's kernels (the output policy on the
# API page). make test ran them with this machine's defaults; here nbval runs them twice more, on numerics
# that change the last bits of NumPy's and torch's results and that any x86-64 CPU can run: one thread (the
# BLAS splits its sums differently), then NumPy's and torch's baseline SIMD kernels instead of AVX2/AVX-512
# and MKL's compatible path. check_numerics.py fails a pass whose settings did not take effect. The
# OPENBLAS_* variables are left alone: a learner's laptop has none of them.
ONE_THREAD := OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
OTHER_SIMD := NPY_DISABLE_CPU_FEATURES="X86_V3 X86_V4 AVX512_ICL AVX512_SPR" ATEN_CPU_CAPABILITY=default MKL_CBWR=COMPATIBLE

test-stable: $(STAMP) ## re-run the chapters under nbval on one thread, then on other SIMD kernels
	$(ONE_THREAD) $(BIN)/python scripts/check_numerics.py one-thread
	$(ONE_THREAD) $(BIN)/python -m pytest chapters
	$(OTHER_SIMD) $(BIN)/python scripts/check_numerics.py other-simd
	$(OTHER_SIMD) $(BIN)/python -m pytest chapters

# Jupyter refuses to run as root unless told to; containers often run as root.
LAB_ARGS ?= $(if $(filter 0,$(shell id -u)),--allow-root)

lab: $(STAMP) ## open JupyterLab on chapters/
	$(BIN)/jupyter lab --notebook-dir=chapters $(LAB_ARGS)

execute: $(STAMP) ## re-run every chapter top to bottom and save its outputs
	$(BIN)/python scripts/execute_chapters.py chapters/*.ipynb

# Not part of make test: several minutes, about 12 GB of memory. Some machines' environments set
# OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE, which make NumPy's BLAS pick an older or mis-sized kernel; a
# learner's laptop sets neither, so the benchmark's own command unsets both (tests and CI leave them alone).
# BENCH_ARGS="--sections causal,decoding --record" re-records some sections into the package's recorded run.
BENCH_ARGS ?=
bench: $(STAMP) ## time and memory of the attention implementations against PyTorch's fused kernel: table, bench.json
	env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE $(BIN)/python benchmarks/bench_attention.py --out _build/bench $(BENCH_ARGS)

clean: ## remove _build
	rm -rf _build
