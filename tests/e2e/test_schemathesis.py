"""schemathesis against the service's own /openapi.json over real HTTP: every check, every
phase (examples, coverage, fuzzing, stateful), zero failures allowed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.backends import new_database_url
from tests.fixtures.calls import bearer
from tests.fixtures.hooks import (
    SCHEMATHESIS_EXAMPLES,
    SCHEMATHESIS_EXAMPLES_VARIABLE,
    SCHEMATHESIS_SEED,
    SCHEMATHESIS_SEED_VARIABLE,
)
from tests.fixtures.servers import start_server, stop_server

ROOT = Path(__file__).parents[2]
CONFIG = Path(__file__).with_name("schemathesis.toml")
SCHEMATHESIS = Path(sys.executable).with_name("schemathesis")


def widening_options() -> tuple[str, str]:
    """``--max-examples`` and ``--seed``: PLANTSTORE_SCHEMATHESIS_EXAMPLES and _SEED as pytest
    was started with them, read by conftest at import (inside a test, the autouse fixture has
    deleted every PLANTSTORE_* variable already), else 100 and a fixed seed."""
    return SCHEMATHESIS_EXAMPLES, SCHEMATHESIS_SEED


@pytest.mark.server
def test_schemathesis_finds_nothing(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    server = start_server(new_database_url(backend, tmp_path, request), tmp_path / "server.log")
    try:
        headers = bearer(server.token)
        with server.client() as http:
            for plant_id in (1, 2):
                http.post("/plants", json={"id": plant_id, "name": "seed"}, headers=headers)
            link = http.get("/plants?limit=1", headers=headers).headers["link"]
        cursor = link.split("cursor=", 1)[1].split(">", 1)[0]
        examples, seed = widening_options()
        result = subprocess.run(
            [
                str(SCHEMATHESIS),
                "--config-file",
                str(CONFIG),
                "run",
                f"{server.base_url}/openapi.json",
                "--header",
                f"Authorization: Bearer {server.token}",
                "--checks",
                "all",
                "--phases",
                "examples,coverage,fuzzing,stateful",
                "--max-examples",
                examples,
                "--seed",
                seed,
                "--workers",
                "1",
            ],
            capture_output=True,
            text=True,
            env={
                **os.environ,
                "PLANTSTORE_TEST_CURSOR": cursor,
                "SCHEMATHESIS_HOOKS": "tests.e2e.schemathesis_hooks",
                "PYTHONPATH": str(ROOT),
            },
            cwd=tmp_path,
            timeout=600,
        )
    finally:
        stop_server(server)
    if result.returncode != 0:
        pytest.fail(
            f"schemathesis found failures:\n{result.stdout[-8000:]}\n{result.stderr[-2000:]}"
        )
    assert "failed" not in result.stdout.split("SUMMARY")[-1].lower()
    assert f"Seed: {seed}" in result.stdout, result.stdout[-2000:]  # the run asked for


def environment_at_start() -> dict[str, str]:
    """This process's environment as it was exec'd with: ``/proc/self/environ`` is the
    original block, which neither ``monkeypatch.delenv`` nor ``os.environ`` edits change."""
    raw = Path("/proc/self/environ").read_bytes()
    pairs = (entry.decode(errors="replace").partition("=") for entry in raw.split(b"\0") if entry)
    return {name: value for name, _, value in pairs}


def test_the_widening_settings_are_the_ones_pytest_was_started_with() -> None:
    """What the run above passes to schemathesis is what the developer set (or the default)."""
    started_with = environment_at_start()
    wanted = (
        started_with.get(SCHEMATHESIS_EXAMPLES_VARIABLE, "100"),
        started_with.get(SCHEMATHESIS_SEED_VARIABLE, "20261120"),
    )
    examples, seed = widening_options()
    assert (examples, seed) == wanted
    assert examples.isdigit(), f"{SCHEMATHESIS_EXAMPLES_VARIABLE}={examples!r}: not a count"
    assert seed.isdigit(), f"{SCHEMATHESIS_SEED_VARIABLE}={seed!r}: not a seed"


@pytest.mark.server
def test_setting_the_widening_variables_reaches_the_run(tmp_path: Path) -> None:
    """The test above with both variables set, in a pytest of its own (CI sets neither, and
    the check only bites when they are set)."""
    probe = "test_the_widening_settings_are_the_ones_pytest_was_started_with"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            f"{Path(__file__)}::{probe}",
            "-q",
            "-p",
            "no:cacheprovider",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, SCHEMATHESIS_EXAMPLES_VARIABLE: "7", SCHEMATHESIS_SEED_VARIABLE: "4242"},
        cwd=ROOT,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "1 passed" in done.stdout, done.stdout[-2000:]
