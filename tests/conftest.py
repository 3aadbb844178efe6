"""The suite's fixtures live in tests/fixtures/, one module per concern:

- ``backends``: the ``backends`` marker that chooses a test's backends, a fresh database
  (``db_url``) and client on each, PostgreSQL, and the live servers of a backend;
- ``servers``: real ``plantstore serve`` processes and their helpers;
- ``calls``: tokens through the CLI (``issue_token``, ``alice``, ``bob``), headers, and
  the check of an Error body;
- ``hooks``: no skips in CI, and no developer's PLANTSTORE_* variable in a test;
- ``tiers``: the markers that say what a test needs beyond this process, and the guard that
  keeps them true.

Test modules import helpers from those modules.
"""

from __future__ import annotations

import pytest

# Before anything imports them: a helper's failed assert explains itself as a test's does.
pytest.register_assert_rewrite("tests.fixtures")

pytest_plugins = [
    "tests.fixtures.tiers",
    "tests.fixtures.hooks",
    "tests.fixtures.backends",
    "tests.fixtures.calls",
]
