# The front door: `make run` serves the API, `make test` runs the whole suite.
# Both create .venv and install the project there (pinned by constraints.txt) on first use.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
ARGS ?=
PIP_INSTALL := $(BIN)/python -m pip install --quiet --disable-pip-version-check -c constraints.txt

.PHONY: run test lint typecheck bench bench-group-commit bench-backends clean

$(BIN)/python:
	$(PYTHON) -c 'import sys; sys.exit("plantstore needs Python >= 3.11") if sys.version_info < (3, 11) else None'
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed-run: $(BIN)/python pyproject.toml constraints.txt
	$(PIP_INSTALL) -e .
	touch $@

$(VENV)/.installed-dev: $(BIN)/python pyproject.toml constraints.txt
	$(PIP_INSTALL) -e '.[dev]'
	touch $@ $(VENV)/.installed-run

run: $(VENV)/.installed-run
	$(BIN)/plantstore serve

test: lint typecheck
	$(BIN)/pytest

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(VENV)/.installed-dev
	$(BIN)/mypy

$(VENV)/.installed-bench: $(BIN)/python pyproject.toml constraints.txt
	$(PIP_INSTALL) -e '.[bench]'
	touch $@

# make bench ARGS="--quick" (or --seconds N, --skip-postgres, --profile; see bench/run.py -h)
bench: $(VENV)/.installed-run $(VENV)/.installed-bench
	command -v wrk >/dev/null || (apt-get update -qq && apt-get install -y -qq wrk)
	$(BIN)/python bench/run.py $(ARGS)

bench-group-commit: $(VENV)/.installed-run
	command -v wrk >/dev/null || (apt-get update -qq && apt-get install -y -qq wrk)
	$(BIN)/python bench/group_commit.py

bench-backends: $(VENV)/.installed-run
	command -v wrk >/dev/null || (apt-get update -qq && apt-get install -y -qq wrk)
	$(BIN)/python bench/backends.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
