# Two commands on a fresh machine: `make run` (a local fio + checkpoint sweep, then its report) and
# `make test` (the test suite). Both install what is missing: fio from the OS packages, a venv, the package.
VENV ?= .venv
PY := $(VENV)/bin/python
# A CPU build of torch for the dev/test install; the package itself asks only for a range.
TORCH_PIN ?= torch==2.13.0
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
CONFIG ?= configs/local.yaml
RESULTS ?= results

.PHONY: run test lint torch-floor system-deps install clean-venv

system-deps:  ## fio (with its libaio and liburing) from the OS packages
	@command -v fio >/dev/null 2>&1 || { $(SUDO) apt-get update && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y fio; }

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "$(TORCH_PIN)"
	$(PY) -m pip install --quiet -e ".[checkpoint,test]"
	touch $@

install: system-deps $(VENV)/.installed

run: install  ## sweep the default config, then report what it wrote (even when a case failed)
	@$(VENV)/bin/gdsbench sweep $(CONFIG) -o $(RESULTS); status=$$?; \
	  latest=$$(ls -t $(RESULTS)/*.csv 2>/dev/null | head -n 1); \
	  [ -n "$$latest" ] && $(VENV)/bin/gdsbench report "$$latest"; exit $$status

LINTED := gdsbench tests benchmarks

lint: install  ## ruff (lint + format check) and mypy, as CI runs them
	$(VENV)/bin/ruff check $(LINTED)
	$(VENV)/bin/ruff format --check $(LINTED)
	$(VENV)/bin/mypy

test: lint  ## lint, then the whole test suite
	$(VENV)/bin/pytest

# The oldest torch the package supports (pyproject's floor). PyPI's Linux wheel of it is a CUDA build
# (~3 GB with its nvidia packages), so this is a documented check, not part of `make test`.
TORCH_FLOOR ?= torch==2.7.1
FLOOR_VENV ?= .venv-floor

torch-floor:  ## the checkpoint tests against the floor release of torch, in a venv of its own
	python3 -m venv $(FLOOR_VENV)
	$(FLOOR_VENV)/bin/pip install --quiet "$(TORCH_FLOOR)"
	$(FLOOR_VENV)/bin/pip install --quiet -e ".[checkpoint,test]"
	$(FLOOR_VENV)/bin/python -c "import torch; print('torch', torch.__version__)"
	$(FLOOR_VENV)/bin/pytest -q tests/checkpoint tests/test_workloads.py

clean-venv:
	rm -rf $(VENV)
