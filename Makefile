# Thin targets over the `companion` CLI. `make book` and `make test` work on a fresh machine:
# they create .venv and install the pinned environment (and Debian's chromium for the browser
# test) themselves.
PYTHON  ?= python3.11
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
PROFILE ?= default
JOBS    ?= 1
CH      ?=
# GPU=1 adds Triton for the CUDA kernels; the book needs none of it. (`make test` installs Triton
# anyway, on x86-64 Linux, for its CPU interpreter: the Triton kernel's tests run without a GPU.)
GPU     ?=
comma   := ,
EXTRAS  := test$(if $(GPU),$(comma)gpu)
# REPOSITORY_URL=https://… adds the repository and Binder buttons to the built book.
REPOSITORY_URL ?=

.PHONY: venv book test test-book test-fast chapter bench lint strip clean chromium

# Python may keep its bytecode (ignored by git): pytest then keeps its rewritten test modules
# between runs, which saves `make test-fast` about four CPU-seconds of collection each time.
unexport PYTHONDONTWRITEBYTECODE

venv: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found (set PYTHON=/path/to/python3.11)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade "pip>=24"
	$(BIN)/python -m pip install --quiet -c constraints.txt --config-settings editable_mode=compat -e ".[$(EXTRAS)]"
	touch $(STAMP)

book: venv
	COMPANION_REPOSITORY_URL="$(REPOSITORY_URL)" $(BIN)/companion build --profile $(PROFILE) --jobs $(JOBS)

chapter: venv
	@test -n "$(CH)" || { echo "usage: make chapter CH=03 [PROFILE=quick]"; exit 64; }
	$(BIN)/companion run $(CH) --profile $(PROFILE)

bench: venv
	@mkdir -p _build/bench
	$(BIN)/companion bench swr --plot _build/bench/swr-bench.png --csv _build/bench/swr-bench.csv

# `make test`: every tier, in two processes (pytest-xdist), with the book built at `quick` from the
# quick runs the suite makes anyway (the tests that read it go last; a lock lets one process build
# it while the other waits); the slowest tests are listed at the end.
test: venv chromium
	$(BIN)/python -m pytest -n 2 --durations=25

# `make test-book`: the default book (what readers see) built from scratch where stale, every claim
# it records checked against the contract, and its pages in a browser. CI runs it after `make test`.
test-book: venv chromium
	$(BIN)/python -m pytest -m book --book default --durations=10

# The unit tier: in-process tests only (no subprocess, kernel, cluster or build).
test-fast: venv
	$(BIN)/python -m pytest -m "not slow and not browser and not integration" --durations=10

lint: venv
	$(BIN)/ruff check lib kernels tests

strip: venv
	$(BIN)/companion strip

# The browser test drives Debian's chromium (no browser download).
chromium:
	@command -v chromium >/dev/null || { \
	  echo "installing Debian's chromium for the browser test"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq chromium >/dev/null; }

clean:
	rm -rf _build .pytest_cache .ruff_cache
	find . -name __pycache__ -type d -prune -not -path "./$(VENV)/*" -exec rm -rf {} +
