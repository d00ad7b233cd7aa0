# Every target sets up what it needs: a fresh clone needs nothing but python3 (3.11+).
VENV ?= .venv
PY := $(VENV)/bin/python
PYTHON ?= python3
STAMP := $(VENV)/.installed
DYNAMODB_LOCAL := .servers/dynamodb-local/.version-2.9.30

.PHONY: install demo test lint typecheck bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[dev]"
	touch $(STAMP)

$(DYNAMODB_LOCAL): tests/dynamodb_local/install.sh
	bash tests/dynamodb_local/install.sh .servers/dynamodb-local

install: $(STAMP) $(DYNAMODB_LOCAL)

demo: $(STAMP)
	$(VENV)/bin/stashpoint demo

lint: $(STAMP)
	$(PY) -m ruff check src tests bench examples moto_fixtures infra
	$(PY) -m ruff format --check src
	$(PY) -m mypy src
	$(PY) -m mypy --strict tests/typing
	$(VENV)/bin/lint-imports
	$(VENV)/bin/cfn-lint infra/*.yaml

typecheck: lint

# The tests start SeaweedFS and DynamoDB Local on 127.0.0.1 themselves (tests/servers.py)
# and stop them by PID when the session ends.
test: $(STAMP) $(DYNAMODB_LOCAL)
	$(MAKE) lint
	$(PY) -m pytest -q

bench: $(STAMP) $(DYNAMODB_LOCAL)
	$(PY) bench/run.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
