# The front door: `make run` serves the API, `make test` runs the whole suite.
# Both create .venv and install the project there (pinned by constraints.txt) on first use.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
ARGS ?=
PIP_INSTALL := $(BIN)/python -m pip install --quiet --disable-pip-version-check -c constraints.txt

.PHONY: run test test-fast node-tools pgbouncer lint typecheck bench bench-group-commit bench-trees bench-backends torture faults fuzz soak slow-clients clean

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

# The whole suite: the `serial` tests alone, then the rest side by side on TEST_WORKERS
# processes (their waits for servers overlap; a module sharing a server stays on one). ARGS
# narrow it: make test ARGS="tests/plants", ARGS="-m 'not postgres'"; docs/development.md has
# more. pytest exits 5 when a selection holds no test: no serial test among ARGS is no failure.
TEST_WORKERS ?= 4
PYTEST := $(BIN)/pytest
TIERS := server or root or container or cluster or browser or serial
test: lint typecheck node-tools pgbouncer
	$(PYTEST) -m serial $(ARGS) || [ $$? -eq 5 ]
	$(PYTEST) -n $(TEST_WORKERS) --dist loadgroup -m "not serial" $(ARGS)

# The loop to run while working: lint, types, and every test that needs no process beyond
# pytest's own (no server, and so no PostgreSQL: SQLite in-process), on one process per core.
test-fast: lint typecheck
	$(PYTEST) -n auto --dist loadgroup -m "not ($(TIERS) or postgres)" $(ARGS)

# Node programs the tests run, exactly as each package-lock.json pins them: node-oidc-provider
# (the real identity provider of the JWT tests) and the docs platforms' checkers (Redocly,
# Mintlify). Without npm they are left out, and the tests that need them say so.
NODE_TOOLS := tests/auth/jwt/oidc/node_modules/.installed tools/docs-lint/node_modules/.installed
node-tools: $(NODE_TOOLS)

%/node_modules/.installed: %/package.json %/package-lock.json
	@if command -v npm >/dev/null; then \
		npm ci --prefix $* --no-audit --no-fund --loglevel=error && touch $@; \
	else echo "npm not found: the JWT provider and docs-lint tests will not run"; fi

# PgBouncer 1.24, built from Debian's source into the virtualenv: the pooler that keeps prepared
# statements in transaction pooling, for its tests and make bench. Without a C compiler and the
# headers of libevent, OpenSSL and c-ares it is left out, and the tests that need it say so.
pgbouncer: $(VENV)/pgbouncer/bin/pgbouncer

$(VENV)/pgbouncer/bin/pgbouncer: tools/build-pgbouncer
	@tools/build-pgbouncer $(VENV)/pgbouncer || echo "PgBouncer 1.24 not built: its tests will not run"

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

typecheck: $(VENV)/.installed-dev
	$(BIN)/mypy

$(VENV)/.installed-bench: $(BIN)/python pyproject.toml constraints.txt
	$(PIP_INSTALL) -e '.[bench]'
	touch $@

# make bench ARGS="--quick" (or --seconds N, --skip-postgres, --profile; see python -m bench.speed -h)
bench: $(VENV)/.installed-run $(VENV)/.installed-bench pgbouncer
	command -v wrk >/dev/null || (apt-get update -qq && apt-get install -y -qq wrk)
	$(BIN)/python -m bench.speed $(ARGS)

$(VENV)/.installed-fuzz: $(VENV)/.installed-dev
	touch $@

# Crash safety: >= 100 SIGKILLs under concurrent writes, on SQLite and PostgreSQL.
torture: $(VENV)/.installed-dev
	$(BIN)/python -m trials.torture $(ARGS)

# Faults of the environment under load (needs root): disk full, I/O error, frozen file system,
# the database file removed or replaced; PostgreSQL ending connections, restarting, stopped;
# a second serve on a taken port. make faults ARGS="--only disk-full,frozen --seconds 4"
faults: $(VENV)/.installed-dev
	$(BIN)/python -m trials.faults $(ARGS)

# Bad input at volume: schemathesis (>= 10,000 requests per backend) and atheris.
fuzz: $(VENV)/.installed-fuzz
	$(BIN)/python -m trials.fuzz $(ARGS)

# Ten minutes of open-loop mixed load at half the maximum rate.
soak: $(VENV)/.installed-run $(VENV)/.installed-bench
	command -v wrk >/dev/null || (apt-get update -qq && apt-get install -y -qq wrk)
	$(BIN)/python -m bench.soak $(ARGS)

# Normal traffic while slowhttptest holds 500 slow connections.
slow-clients: $(VENV)/.installed-run $(VENV)/.installed-bench
	command -v wrk >/dev/null || (apt-get update -qq && apt-get install -y -qq wrk)
	command -v slowhttptest >/dev/null || (apt-get update -qq && apt-get install -y -qq slowhttptest)
	$(BIN)/python -m bench.slow_clients $(ARGS)

bench-group-commit: $(VENV)/.installed-run
	command -v wrk >/dev/null || (apt-get update -qq && apt-get install -y -qq wrk)
	$(BIN)/python -m bench.group_commit

# make bench-trees ARGS="/tmp/before/src src": two source trees side by side (bench/trees/).
bench-trees: $(VENV)/.installed-run $(VENV)/.installed-bench
	command -v wrk >/dev/null || (apt-get update -qq && apt-get install -y -qq wrk)
	$(BIN)/python -m bench.trees $(ARGS)

bench-backends: $(VENV)/.installed-run
	command -v wrk >/dev/null || (apt-get update -qq && apt-get install -y -qq wrk)
	$(BIN)/python -m bench.backends

clean:
	rm -rf $(VENV) tests/auth/jwt/oidc/node_modules tools/docs-lint/node_modules .pytest_cache .mypy_cache .ruff_cache .hypothesis
