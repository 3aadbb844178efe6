"""A second ``plantstore serve`` (another database) on the host:port a running one serves:
it must give up within five seconds, printing one line that names the address, while the
first serves on (20 lists by its token, each on a new connection, all 200)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import httpx

from .config import REFUSE_LIMIT, FaultConfig
from .run import Run
from .server import Server, kill_group, serve_command, server_environment
from .verdict import FaultResult, Target

LISTS = 20


def run_second_serve(config: FaultConfig) -> FaultResult:
    name = "second-serve"
    directory = config.workdir / name
    directory.mkdir(parents=True, exist_ok=True)
    server = Server(config, f"sqlite:///{directory / 'first.db'}", directory / "server.log")
    run = Run(name, "sqlite-port", config, server)
    try:
        server.start()
        run.begin()
        second_serve(run, directory)
        run.finish()
        run.judge_lost(run.list_plants())
    except Exception as exc:
        run.fail(exc)
    finally:
        run.stop_load()
        server.stop()
    return run.result


def second_serve(run: Run, directory: Path) -> None:
    server, config = run.server, run.config
    address = f"127.0.0.1:{server.port}"
    second_db = directory / "second.db"
    log = directory / "second.log"
    with log.open("wb") as out:
        second = subprocess.Popen(
            serve_command(config, server.port),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=server_environment(config, f"sqlite:///{second_db}"),
            cwd=directory,
            start_new_session=True,
        )
    run.mark_start(f"a second plantstore serve started on {address}, which the first serves")
    assert run.result.start is not None
    started = run.result.start
    status, exited = wait_exit(second, started + REFUSE_LIMIT)
    lists = lists_by_token(server.base_url, server.token)  # the second may still be serving
    if status is None:  # late, or never: how late, within ten seconds more
        status, exited = wait_exit(second, time.monotonic() + 10)
    kill_group(second.pid)  # whatever is left of it
    second.wait()
    run.mark_end()
    lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    if second_db.exists():
        run.result.notes.append(f"the refused serve left {second_db.name} behind")
    took = None if exited is None else exited - started
    refused = status not in (None, 0) and took is not None and took <= REFUSE_LIMIT
    run.result.extra += [
        Target(
            f"second serve refused within {REFUSE_LIMIT:g} s",
            refused,
            f"exit status {status} after {took:.2f} s"
            if took is not None
            else f"still running {REFUSE_LIMIT + 10:g} s later (killed)",
        ),
        Target(
            "one line naming the address",
            len(lines) == 1 and address in lines[0],
            f"{len(lines)} lines: {' | '.join(line[:160] for line in lines[:3])}",
        ),
        Target(
            f"the first serves on ({LISTS} lists by its token)",
            all(code == 200 for code in lists) and first_kept_writing(run),
            f"lists answered {summary(lists)}; creates during it {summary(creates_between(run))}",
        ),
    ]


def wait_exit(process: subprocess.Popen[bytes], deadline: float) -> tuple[int | None, float | None]:
    """The process's exit status and when it was seen to exit, or (None, None) by
    ``deadline``."""
    while time.monotonic() < deadline:
        status = process.poll()
        if status is not None:
            return status, time.monotonic()
        time.sleep(0.02)
    return None, None


def lists_by_token(base_url: str, token: str) -> list[int]:
    codes: list[int] = []
    fresh = httpx.Limits(max_keepalive_connections=0)  # each on a new connection
    with httpx.Client(base_url=base_url, timeout=5, limits=fresh) as http:
        for _ in range(LISTS):
            try:
                response = http.get(
                    "/plants?limit=10", headers={"Authorization": f"Bearer {token}"}
                )
                codes.append(response.status_code)
            except httpx.HTTPError:
                codes.append(0)
    return codes


def creates_between(run: Run) -> list[int]:
    start, end = run.result.start, run.result.end
    load = run.load
    answers = load.answers if load is not None else run.result.answers
    return [
        a.status or 0
        for a in list(answers)
        if start is not None and end is not None and start <= a.sent <= end
    ]


def first_kept_writing(run: Run) -> bool:
    return all(code == 200 for code in creates_between(run))


def summary(codes: list[int]) -> str:
    counts: dict[int, int] = {}
    for code in codes:
        counts[code] = counts.get(code, 0) + 1
    return " ".join(f"{code or 'none'}:{n}" for code, n in sorted(counts.items())) or "none"
