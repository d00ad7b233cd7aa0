# Every target sets up what it needs: a fresh clone needs nothing but python3 (3.11+).
VENV ?= .venv
PY := $(VENV)/bin/python
PYTHON ?= python3
STAMP := $(VENV)/.installed

.PHONY: install demo test lint typecheck bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(PY) -m stashpoint.demo

lint: $(STAMP)
	$(PY) -m ruff check src tests bench moto_fixtures
	$(PY) -m ruff format --check src
	$(PY) -m mypy src

typecheck: lint

test: $(STAMP)
	$(MAKE) lint
	$(PY) -m pytest -q

bench: $(STAMP)
	$(PY) bench/run.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
