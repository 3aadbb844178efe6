"""The documented examples, run as written: the README's quick start against a real server,
and docs/operating.md's nginx front against two real instances on one PostgreSQL."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.fixtures.calls import bearer
from tests.fixtures.servers import LiveServer, free_port, start_server, stop_server
from tests.pg import PostgresServer

README = Path(__file__).parents[2] / "README.md"
OPERATING = Path(__file__).parents[2] / "docs" / "operating.md"


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


@pytest.mark.server
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


def nginx_config(upstreams: list[str], port: int) -> str:
    """docs/operating.md's nginx block, pointed at local instances and a free port."""
    block = re.search(r"<!-- nginx.*?-->\n```nginx\n(.*?)```", OPERATING.read_text(), re.S)
    assert block is not None, "docs/operating.md lost its nginx block"
    config = block.group(1)
    documented = re.findall(r"server (10\.0\.0\.\d+:8000)", config)
    assert len(documented) == len(upstreams) == 2
    for address, upstream in zip(documented, upstreams, strict=True):
        config = config.replace(address, upstream)
    return config.replace("listen 80;", f"listen 127.0.0.1:{port};")


@pytest.fixture
def two_instances(postgres: PostgresServer, tmp_path: Path) -> Iterator[list[LiveServer]]:
    url = postgres.create_database()
    first = start_server(url, tmp_path / "first.log")
    second = start_server(url, tmp_path / "second.log")
    try:
        yield [first, second]
    finally:
        stop_server(first)
        stop_server(second)


def run_nginx(config: str, directory: Path) -> subprocess.Popen[str]:
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    (directory / "nginx.conf").write_text(config)
    globals_ = f"daemon off; pid {directory}/nginx.pid; error_log {directory}/error.log;"
    return subprocess.Popen(
        [nginx, "-p", str(directory), "-c", str(directory / "nginx.conf"), "-g", globals_],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
        text=True,
    )


def wait_for(url: str) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.TransportError:
            time.sleep(0.05)
    raise AssertionError(f"nothing answered at {url}")


@pytest.mark.skipif(
    shutil.which("nginx") is None and not Path("/usr/sbin/nginx").exists(),
    reason="nginx is not installed (apt-get install nginx-light); .ci/run installs it",
)
@pytest.mark.server
def test_the_nginx_example_balances_and_fails_over(
    two_instances: list[LiveServer], tmp_path: Path
) -> None:
    first, second = two_instances
    port = free_port()
    upstreams = [server.base_url.removeprefix("http://") for server in two_instances]
    nginx = run_nginx(nginx_config(upstreams, port), tmp_path)
    try:
        wait_for(f"http://127.0.0.1:{port}/healthz")
        headers = bearer(first.token)
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as http:
            assert http.get("/readyz").status_code == 200
            for plant_id in range(10):
                response = http.post("/plants", json={"id": plant_id, "name": "n"}, headers=headers)
                assert response.status_code == 200, response.text
            stop_server(first)  # one instance goes away: nginx carries on with the other
            for plant_id in range(10, 20):
                response = http.post("/plants", json={"id": plant_id, "name": "n"}, headers=headers)
                assert response.status_code == 200, response.text
            listed = http.get("/plants", headers=headers)
            assert listed.status_code == 200
            assert len(listed.json()) == 20
            assert http.get("/readyz").status_code == 200
    finally:
        nginx.terminate()
        nginx.wait(timeout=10)
    assert second.process.poll() is None
