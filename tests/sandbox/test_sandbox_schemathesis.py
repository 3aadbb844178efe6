"""schemathesis against POST /sandbox/tokens of a sandbox-mode server, as test_schemathesis.py
runs it against the rest: every check, every phase but the stateful one (no link leads
from or to this operation), zero failures. The issuance limit is small,
so the documented 429 is met too."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.e2e.test_schemathesis import CONFIG, ROOT, SCHEMATHESIS, widening_options
from tests.fixtures.servers import start_server, stop_server

pytestmark = pytest.mark.server


def test_schemathesis_finds_nothing_in_sandbox_mode(tmp_path: Path) -> None:
    server = start_server(
        f"sqlite:///{tmp_path / 'plantstore.db'}",
        tmp_path / "server.log",
        PLANTSTORE_SANDBOX="true",
        PLANTSTORE_SANDBOX_ISSUE_LIMIT="2/hour",
    )
    try:
        examples, seed = widening_options()
        result = subprocess.run(
            [
                str(SCHEMATHESIS),
                "--config-file",
                str(CONFIG),
                "run",
                f"{server.base_url}/openapi.json",
                "--include-path",
                "/sandbox/tokens",
                "--checks",
                "all",
                "--phases",
                "examples,coverage,fuzzing",
                "--max-examples",
                examples,
                "--seed",
                seed,
                "--workers",
                "1",
            ],
            capture_output=True,
            text=True,
            env={**os.environ, "PLANTSTORE_TEST_CURSOR": "-", "PYTHONPATH": str(ROOT)},
            cwd=tmp_path,
            timeout=600,
        )
        log = server.log_path.read_text()
    finally:
        stop_server(server)
    if result.returncode != 0:
        pytest.fail(
            f"schemathesis found failures:\n{result.stdout[-8000:]}\n{result.stderr[-2000:]}"
        )
    assert "Tested: 1" in result.stdout, result.stdout[-2000:]
    assert f"Seed: {seed}" in result.stdout, result.stdout[-2000:]
    assert '"route":"/sandbox/tokens","status":200' in log  # tokens were issued...
    assert '"route":"/sandbox/tokens","status":429' in log  # ...until the limit answered
