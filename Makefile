# shoal — two commands do everything on a fresh machine:
#   make demo   create .venv, install shoal, run the pipeline on the bundled Cora dataset:
#               the five engines on a 2-process store, then shoal report (~2-3 min, 2 cores)
#   make test   create/update .venv if needed and run the test suite on TEST_WORKERS processes
#               (pytest-xdist; each test file runs whole on one worker)
PYTHON ?= python3
# two workers keep both cores of a 2-core machine busy while one test waits on its ranks,
# a subprocess or the disk; the distributed tests start ranks of their own, so more workers
# than cores only oversubscribe (TEST_WORKERS=0 runs the suite in one process)
TEST_WORKERS ?= 2
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
DEMO   ?= /tmp/shoal-demo

.PHONY: venv demo test lint format clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# torch first and pinned: an unpinned torch would pull a multi-GB CUDA build.
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/shoal demo --workdir $(DEMO)

test: $(STAMP)
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile tests

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests bench examples
	$(VENV)/bin/ruff format --check src tests bench examples

format: $(STAMP)
	$(VENV)/bin/ruff format src tests bench examples
	$(VENV)/bin/ruff check --fix src tests bench examples

clean:
	rm -rf $(VENV) build dist src/*.egg-info .pytest_cache
