"""schemathesis against the service's own /openapi.json over real HTTP: every check, every
phase (examples, coverage, fuzzing, stateful), zero failures allowed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import bearer, new_database_url, start_server, stop_server

ROOT = Path(__file__).parent.parent
CONFIG = Path(__file__).with_name("schemathesis.toml")
SCHEMATHESIS = Path(sys.executable).with_name("schemathesis")


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
        examples = os.environ.get("PLANTSTORE_SCHEMATHESIS_EXAMPLES", "100")
        seed = os.environ.get("PLANTSTORE_SCHEMATHESIS_SEED", "20261120")
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
                "SCHEMATHESIS_HOOKS": "tests.schemathesis_hooks",
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
