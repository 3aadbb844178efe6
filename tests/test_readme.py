"""The README's quick start, run exactly as written against a real server."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from .conftest import start_server, stop_server

README = Path(__file__).parent.parent / "README.md"


def quickstart() -> list[tuple[str, str]]:
    """Return (command, documented output) pairs from the README's quick start block."""
    text = README.read_text()
    block = re.search(r"<!-- quickstart.*?-->\n```sh\n(.*?)```", text, re.S)
    assert block is not None, "README lost its quick start block"
    steps: list[tuple[str, str]] = []
    for chunk in block.group(1).split("\n\n"):
        lines = chunk.strip().splitlines()
        if not lines or lines[0].startswith("export TOKEN="):
            continue
        command = "\n".join(line for line in lines if not line.startswith("# "))
        output = "\n".join(line[2:] for line in lines if line.startswith("# "))
        steps.append((command, output))
    return steps


def test_readme_mentions_both_front_door_commands() -> None:
    text = README.read_text()
    assert "make run" in text
    assert "make test" in text


def test_quickstart_runs_as_written(tmp_path: Path) -> None:
    steps = quickstart()
    assert len(steps) == 4
    server = start_server(f"sqlite:///{tmp_path / 'readme.db'}", tmp_path / "server.log")
    try:
        for command, documented in steps:
            result = subprocess.run(
                ["bash", "-c", command.replace("http://127.0.0.1:8000", server.base_url)],
                capture_output=True,
                text=True,
                env={**os.environ, "TOKEN": server.token},
                timeout=30,
                check=True,
            )
            assert result.stdout.strip() == documented, command
    finally:
        stop_server(server)
