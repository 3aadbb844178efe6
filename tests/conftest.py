"""The suite's fixtures live in tests/fixtures/, one module per concern:

- ``backends``: the ``backends`` marker that chooses a test's backends, a fresh database
  (``db_url``) and client on each, PostgreSQL, and the live servers of a backend;
- ``servers``: real ``plantstore serve`` processes and their helpers;
- ``calls``: tokens through the CLI (``issue_token``, ``alice``, ``bob``), headers, and
  the check of an Error body;
- ``hooks``: no skips in CI, and no developer's PLANTSTORE_* variable in a test.

Test modules import helpers from those modules. The names below are re-exported only for
tests/db/sqlite/, which still imports them from here.
"""

from __future__ import annotations

import pytest

# Before anything imports them: a helper's failed assert explains itself as a test's does.
pytest.register_assert_rewrite("tests.fixtures")

from tests.fixtures.backends import run_sql  # noqa: E402
from tests.fixtures.calls import assert_error, bearer, run_cli, token_from_output  # noqa: E402
from tests.fixtures.servers import (  # noqa: E402
    LiveServer,
    all_plants,
    answered_by,
    child_pids,
    kill_server,
    start_server,
    start_workers,
    stop_server,
    wait_for_started_workers,
)

pytest_plugins = [
    "tests.fixtures.hooks",
    "tests.fixtures.backends",
    "tests.fixtures.calls",
]

__all__ = [
    "LiveServer",
    "all_plants",
    "answered_by",
    "assert_error",
    "bearer",
    "child_pids",
    "kill_server",
    "run_cli",
    "run_sql",
    "start_server",
    "start_workers",
    "stop_server",
    "token_from_output",
    "wait_for_started_workers",
]
