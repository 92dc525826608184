# Two commands on a fresh machine: `make run` (a local fio + checkpoint sweep, then its report) and
# `make test` (the test suite). Both install what is missing: fio from the OS packages, a venv, the package;
# `make test` adds Ceph and Chromium for their tests.
VENV ?= .venv
PY := $(VENV)/bin/python
# A CPU build of torch for the dev/test install; the package itself asks only for a range.
TORCH_PIN ?= torch==2.13.0
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
CONFIG ?= configs/local.yaml
RESULTS ?= results

.PHONY: run test test-fast coverage lint docs-screenshot torch-floor system-deps ceph-deps browser-deps mpi-deps slurm-deps install \
	clean-venv gpu-smoke

system-deps:  ## what the default sweep needs from the OS packages: fio (with its libaio and liburing), python3-venv
	@command -v fio >/dev/null 2>&1 && python3 -c "import ensurepip" 2>/dev/null || { $(SUDO) apt-get update && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y fio python3-venv; }

ceph-deps:  ## Debian's Ceph (~200 MB), for the one-host Ceph (`make ceph-up`) and its tests
	@command -v ceph-mon >/dev/null 2>&1 || { $(SUDO) apt-get update && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y --no-install-recommends \
	  ceph ceph-mon ceph-osd ceph-mgr radosgw ceph-common ceph-mds ceph-fuse; }

mpi-deps:  ## Debian's Open MPI (mpirun), for `launcher: mpirun` and its tests
	@command -v mpirun >/dev/null 2>&1 || { $(SUDO) apt-get update && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y --no-install-recommends openmpi-bin; }

slurm-deps:  ## Debian's Slurm and munge (3.5 MB, 13 MB on disk), for the one-host Slurm (`gdsbench slurm up`) and its tests
	@command -v slurmd >/dev/null 2>&1 && command -v slurmctld >/dev/null 2>&1 && command -v srun >/dev/null 2>&1 && \
	  command -v munged >/dev/null 2>&1 || { $(SUDO) apt-get update && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y --no-install-recommends \
	  slurmd slurmctld slurm-client munge; }

browser-deps:  ## Debian's Chromium, headless: the HTML report's browser tests and its screenshot
	@command -v chromium >/dev/null 2>&1 || { $(SUDO) apt-get update && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y chromium; }

# Two distributions from this repository: the checkpoint library ckptio (lib/ckptio) and the benchmark.
# What the default sweep needs (fio's engine and the checkpoint engines: torch, ckptio, safetensors) ...
# --no-compile: pip would byte-compile every file of every wheel (torch's tests too: 62 s against 32 s for this
# install here); Python compiles what is imported, once, on first import (0.2 s for torch, pandas and matplotlib).
$(VENV)/.installed-run: pyproject.toml lib/ckptio/pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --no-compile --upgrade pip
	$(PY) -m pip install --quiet --no-compile "$(TORCH_PIN)"
	$(PY) -m pip install --quiet --no-compile -e "./lib/ckptio[codecs]" -e ".[checkpoint]"
	touch $@

# ... and, for the tests and the other configs, the S3 clients and the test tools.
$(VENV)/.installed: $(VENV)/.installed-run
	$(PY) -m pip install --quiet --no-compile -e "./lib/ckptio[codecs,s3]" -e ".[checkpoint,s3,s3torch,test]"
	touch $@

install: system-deps $(VENV)/.installed

run: system-deps $(VENV)/.installed-run  ## sweep the default config, then report what it wrote (even when a case failed)
	@$(VENV)/bin/gdsbench sweep $(CONFIG) -o $(RESULTS); status=$$?; \
	  latest=$$(ls -t $(RESULTS)/*.csv 2>/dev/null | head -n 1); \
	  [ -n "$$latest" ] && $(VENV)/bin/gdsbench report "$$latest"; exit $$status

LINTED := gdsbench lib tests benchmarks tools

lint: install  ## ruff (lint + format check) and mypy, as CI runs them
	$(VENV)/bin/ruff check $(LINTED)
	$(VENV)/bin/ruff format --check $(LINTED)
	$(VENV)/bin/mypy

# Tests run in parallel (pytest-xdist; work stealing keeps the slow multi-process tests from queueing behind
# each other): two workers more than the cores, since many tests wait on the processes they start (torchrun ranks,
# fio servers, Ceph's daemons, the CLI): 286 s against 298-309 s with one more on the 2-core VM;
# `pytest tests/x.py` alone still runs in one process.
PYTEST_PARALLEL ?= -n $(shell echo $$(( $$(nproc) + 2 ))) --dist worksteal

# The lint runs beside the tests (its output held and printed after theirs); either failing fails the target.
LINT_LOG := $(VENV)/lint.log

test: install ceph-deps browser-deps mpi-deps slurm-deps  ## ruff, mypy and the whole test suite (Ceph's and Chromium's tests too), side by side
	@$(MAKE) --no-print-directory lint > $(LINT_LOG) 2>&1 & lint=$$!; \
	  $(VENV)/bin/pytest $(PYTEST_PARALLEL); tests=$$?; \
	  wait $$lint; linted=$$?; cat $(LINT_LOG); \
	  [ $$linted -eq 0 ] || echo "make test: lint failed (above)"; \
	  [ $$tests -eq 0 ] && [ $$linted -eq 0 ]

test-fast: install  ## the edit loop: every test not marked slow, no lint
	$(VENV)/bin/pytest $(PYTEST_PARALLEL) -q -m "not slow"

coverage: install  ## every test, with branch coverage of both distributions (this process's code; ranks and CLI children are not traced)
	$(VENV)/bin/pytest $(PYTEST_PARALLEL) -q --cov --cov-report=term --cov-report=xml:coverage.xml

docs-screenshot: install browser-deps  ## docs/figures/report-html.png: the whole HTML report of the sample checkpoint runs, headless Chromium
	$(PY) tools/html_screenshot.py docs/figures/report-html.png results/sample/checkpoint/*.csv --full --width 1500

# The oldest torch the package supports (pyproject's floor). PyPI's Linux wheel of it is a CUDA build
# (~3 GB with its nvidia packages), so this is a documented check, not part of `make test`.
TORCH_FLOOR ?= torch==2.7.1
FLOOR_VENV ?= .venv-floor

torch-floor:  ## the checkpoint tests against the floor release of torch, in a venv of its own
	python3 -m venv $(FLOOR_VENV)
	$(FLOOR_VENV)/bin/pip install --quiet --no-compile "$(TORCH_FLOOR)"
	$(FLOOR_VENV)/bin/pip install --quiet --no-compile -e "./lib/ckptio[codecs,s3]" -e ".[checkpoint,s3,s3torch,test]"
	$(FLOOR_VENV)/bin/python -c "import torch; print('torch', torch.__version__)"
	$(FLOOR_VENV)/bin/pytest -q tests/checkpoint tests/test_workloads.py

clean-venv:
	rm -rf $(VENV)

# The first run on a GPU server, one command (docs/gds-server.md, "The first GPU run"): machine facts, doctor,
# the needs_cuda tests, kvikio vs fastpersist at 1 and 8 kvikio threads, the gds load with a flipped byte and
# configs/gds-smoke.yaml, all written to SMOKE_OUT. On a GPU host it pip-installs PyPI's CUDA torch wheel
# (when the venv's is a CPU build) and kvikio-cu<torch's CUDA major>; without one, GPU steps say
# "skipped: no CUDA device" and the rest runs in a minute or two. SMOKE_DIR must be on a real disk.
SMOKE_OUT ?= results/gpu-smoke-$(shell hostname)-$(shell date +%Y%m%d-%H%M%S)
SMOKE_DIR ?= /var/tmp/gdsbench-smoke

gpu-smoke: install  ## the first GPU run: CUDA torch and kvikio installed (tools/gpu_install.py), then everything in SMOKE_OUT
	$(PY) tools/gpu_install.py $(SMOKE_OUT)
	$(VENV)/bin/gdsbench smoke --gpu -o $(SMOKE_OUT) -d $(SMOKE_DIR)

# A one-host Ceph for tests and demos (docs/ceph.md): mon, mgr, one OSD, radosgw (S3) and CephFS, on 127.0.0.1 only,
# everything in CEPH_DIR; `make ceph-down` stops it and removes what ceph-up made. Root.
CEPH_DIR ?= /var/tmp/gdsbench-ceph
.PHONY: ceph-up ceph-down ceph-demo

ceph-up: install ceph-deps  ## a one-host Ceph: prints its monitor, S3 endpoint and credentials file, CephFS mount and pools
	$(SUDO) $(VENV)/bin/gdsbench ceph up --dir $(CEPH_DIR)

ceph-down:  ## stop and remove the one-host Ceph of ceph-up
	$(SUDO) $(VENV)/bin/gdsbench ceph down --dir $(CEPH_DIR)

ceph-demo: install ceph-deps  ## the one-host Ceph's tiers beside the local disk, then the durability ladder beside its baselines (configs/tiers.yaml): up, sweep, report, down
	$(SUDO) $(VENV)/bin/gdsbench ceph up --dir $(CEPH_DIR)
	@set -a; . $(CEPH_DIR)/s3.env; set +a; \
	  $(VENV)/bin/gdsbench sweep configs/ceph-local.yaml -o $(RESULTS)/ceph-local; a=$$?; \
	  $(VENV)/bin/gdsbench sweep configs/ceph-local-disk.yaml -o $(RESULTS)/ceph-local; b=$$?; \
	  $(VENV)/bin/gdsbench sweep configs/tiers.yaml -o $(RESULTS)/tiers; c=$$?; \
	  $(SUDO) $(VENV)/bin/gdsbench ceph down --dir $(CEPH_DIR); \
	  $(VENV)/bin/gdsbench report $$(ls -t $(RESULTS)/ceph-local/*.csv | head -n 2); \
	  $(VENV)/bin/gdsbench report $$(ls -t $(RESULTS)/tiers/*.csv | head -n 1); \
	  [ $$a -eq 0 ] && [ $$b -eq 0 ] && [ $$c -eq 0 ]
