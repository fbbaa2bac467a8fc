# Every target bootstraps its own virtual environment from pyproject.toml: a fresh clone needs
# nothing installed by hand. The stamp file re-installs when pyproject.toml changes.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-dev
BENCH_STAMP := $(VENV)/.installed-bench

.PHONY: test demo bench lint clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

$(BENCH_STAMP): pyproject.toml $(STAMP)
	$(PY) -m pip install --quiet -e '.[dev,bench]'
	touch $(BENCH_STAMP)

test: $(STAMP)
	$(PY) -m pytest

demo: $(STAMP)
	$(PY) scripts/demo.py

bench: $(BENCH_STAMP)
	$(PY) -m benchmarks.speed

lint: $(STAMP)
	$(PY) -m ruff check credax tests benchmarks scripts

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
