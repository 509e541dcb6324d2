# Entry points of README's quickstart. Every target sets up .venv first (idempotent).
VENV ?= .venv
PYTHON ?= python3
PY := $(VENV)/bin/python
STAMP := $(VENV)/.aaco-installed

# The shared TraceLake (DuckLake) needs DuckDB 1.5: a second environment with the same code.
DUCKLAKE_VENV ?= .venv-ducklake
DUCKLAKE_STAMP := $(DUCKLAKE_VENV)/.aaco-installed

# ONNX Runtime for this host: the ROCm build where an AMD GPU's /dev/kfd exists, else the CPU
# one (RUNTIME=rocm|cpu to choose). They install the same module: the other is removed first.
RUNTIME ?= $(shell test -e /dev/kfd && echo rocm || echo cpu)
ORT_PACKAGE := $(if $(filter rocm,$(RUNTIME)),onnxruntime-rocm,onnxruntime)
OTHER_ORT := $(if $(filter rocm,$(RUNTIME)),onnxruntime,onnxruntime-rocm)
EXTRAS := dev,cluster,docs,$(RUNTIME)
# Both builds present (a venv made before the choice): remove both, then install the chosen one.
define one_runtime
	@if $(1) -m pip show -q $(OTHER_ORT) 2>/dev/null; then \
	  echo "replacing $(OTHER_ORT) with $(ORT_PACKAGE) (RUNTIME=$(RUNTIME))"; \
	  $(1) -m pip uninstall -y -q $(OTHER_ORT) $(ORT_PACKAGE); \
	fi
endef

.PHONY: setup ducklake-setup browser services run test bench bench-gpu lint docs docs-check

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(call one_runtime,$(PY))
	$(PY) -m pip install -q -e '.[$(EXTRAS)]'
	touch $(STAMP)

setup: $(STAMP)

$(DUCKLAKE_STAMP): pyproject.toml
	test -x $(DUCKLAKE_VENV)/bin/python || $(PYTHON) -m venv $(DUCKLAKE_VENV)
	$(DUCKLAKE_VENV)/bin/python -m pip install -q --upgrade pip
	$(call one_runtime,$(DUCKLAKE_VENV)/bin/python)
	$(DUCKLAKE_VENV)/bin/python -m pip install -q -e '.[$(EXTRAS),ducklake]'
	touch $(DUCKLAKE_STAMP)

ducklake-setup: $(DUCKLAKE_STAMP)

# The observatory: AACO_HOME (default ~/.aaco), zoo built if the registry is empty, Dagster
# webserver + daemon on http://127.0.0.1:3000 with sensors and the nightly schedule running
# (another port: AACO_UI_PORT=3001 make run).
run: setup
	$(VENV)/bin/aaco ui --host 127.0.0.1

# Headless Chromium for the UI end-to-end test (tests/dagster/test_ui_e2e.py): Debian's package,
# installed once as root or with passwordless sudo; where it cannot be installed that test is skipped.
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  sudo=$$([ "$$(id -u)" = 0 ] || echo "sudo -n"); \
	  echo "installing chromium for the UI end-to-end test"; \
	  $$sudo apt-get update -qq && \
	  $$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	} || echo "warning: chromium could not be installed; the UI end-to-end test will be skipped" >&2

# Real services for the scale-out tests (tests/services.py starts and stops them itself): Debian's
# PostgreSQL and redis, installed once like chromium; where they cannot be, those tests skip. Also
# xfsprogs, for the evidence copy's test on a real copy-on-write file system (tests/conftest.py).
services:
	@{ [ -x "$$(ls /usr/lib/postgresql/*/bin/initdb 2>/dev/null | tail -n 1)" ] && \
	   command -v redis-server >/dev/null 2>&1 && command -v mkfs.xfs >/dev/null 2>&1; } || { \
	  sudo=$$([ "$$(id -u)" = 0 ] || echo "sudo -n"); \
	  echo "installing postgresql, redis-server and xfsprogs for the tests"; \
	  $$sudo apt-get update -qq && \
	  $$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql redis-server xfsprogs >/dev/null; \
	} || echo "warning: postgresql/redis-server/xfsprogs could not be installed; the tests that need them will be skipped" >&2

# The suite on DuckDB 2.0, in two processes (a test file stays in one: its module fixtures are
# made once), then the TraceLake's tests again on DuckDB 1.5 with the shared (DuckLake) backend's.
test: setup browser services ducklake-setup
	$(VENV)/bin/pytest -q -p no:cacheprovider -n 2 --dist loadfile --durations=20
	$(DUCKLAKE_VENV)/bin/pytest -q -p no:cacheprovider tests/tracelake/test_ducklake.py \
	  tests/tracelake/test_tracelake.py tests/tracelake/test_lake_integrity.py \
	  tests/tracelake/test_shared_lake_errors.py tests/collectors/test_trace_readers.py \
	  tests/cli/test_first_hour_cli.py::test_run_against_a_shared_lake_prints_that_lake

bench: setup
	$(PY) benchmarks/run.py

bench-gpu: setup
	$(PY) benchmarks/gpu_traces.py

lint: setup
	$(VENV)/bin/ruff check .

# The documentation site on http://127.0.0.1:8000 (DOCS_PORT=8001 make docs), rebuilt on change;
# its reference pages are generated from the code (docs/hooks/generated_reference.py).
DOCS_PORT ?= 8000
docs: setup
	$(VENV)/bin/mkdocs serve -a 127.0.0.1:$(DOCS_PORT)

# What CI runs: the site built strictly, so a broken link, a missing page or an undocumented
# command, sidecar key, asset, table or variable fails.
docs-check: setup
	$(VENV)/bin/mkdocs build --strict --site-dir $(VENV)/site
