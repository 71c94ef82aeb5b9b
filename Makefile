# attention-claims: two commands do everything on a fresh machine (Python >= 3.11, pip, PyPI).
#   make book   install if needed, then build the site into _build/html (offline, -n -W)
#   make test   install if needed, then run every test, including strict nbval on every notebook
SHELL := /bin/bash
.SHELLFLAGS := -eo pipefail -c
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
JOBS ?= 2
# The same build flags in every gate: nitpicky, warnings are errors, report them all.
BOOK_FLAGS := -n -W --keep-going
NBVAL_FLAGS := --nbval --nbval-current-env --nbval-sanitize-with tests/nbval_sanitize.cfg

.PHONY: install book test test-fast execute lock clean help

help:
	@echo "make book | make test | make test-fast (no notebooks) | make execute (refresh stored outputs) | make clean"

$(STAMP): requirements.lock pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "attention-claims needs Python >= 3.11, found " + sys.version.split()[0])'
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "Installing pinned requirements into $(VENV) (torch 2.13.0 CPU build; a few minutes on a fresh machine)"
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements.lock
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	@touch $@

install: $(STAMP)

book: $(STAMP)
	$(BIN)/jupyter-book build . $(BOOK_FLAGS)
	@echo "Open _build/html/index.html in a browser (or: $(BIN)/python -m http.server -d _build/html)"

test: $(STAMP)
	$(BIN)/python -m pytest -n $(JOBS) --dist loadfile $(NBVAL_FLAGS) tests notebooks

test-fast: $(STAMP)
	$(BIN)/python -m pytest -n $(JOBS) tests

# Re-execute notebooks in place (default seed, one thread) after changing one; commit the result.
execute: $(STAMP)
	$(BIN)/python tools/execute_notebooks.py $(NOTEBOOKS)

lock: $(STAMP)
	$(BIN)/python -m pip install --quiet -r requirements.txt
	{ echo "# Exact versions of everything installed (pip freeze --all of a working .venv), Python 3.11."; \
	  echo "# Regenerate with 'make lock' after changing requirements.txt. torch is pinned to the CPU build's version."; \
	  $(BIN)/python -m pip freeze --all | grep -v -E "^(-e |pip==|attnref)" | sed 's/^torch==2.13.0+cpu$$/torch==2.13.0/'; } > requirements.lock

clean:
	rm -rf _build
