"""schemathesis against a real ``plantstore serve`` per backend: rounds with the next seeds
until its reports count the requests wanted, with tests/e2e/schemathesis.toml and its hooks."""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from harness.postgres import postgres_database
from harness.servers import Server, start_server

from .summary import Row, indent

ROOT = Path(__file__).resolve().parent.parent.parent  # the repository
SCHEMATHESIS_CONFIG = ROOT / "tests" / "schemathesis.toml"
SCHEMATHESIS_HOOKS = "tests.schemathesis_hooks"
SCHEMATHESIS = Path(sys.executable).with_name("schemathesis")
# Far beyond anything a fuzzer sends: this run is about input, not about the limiter; and
# the two backends' servers run side by side, so neither takes the metrics port.
SERVER_ENV = {
    "PLANTSTORE_RATE_LIMIT": "1000000/second",
    "PLANTSTORE_AUTH_FAILURE_LIMIT": "1000000/second",
    "PLANTSTORE_METRICS_ADDRESS": "off",
}
# One --max-examples yields 2 to 5 requests over all phases (the stateful phase varies most).
EXAMPLES_PER_REQUEST = 1 / 2
MAX_ROUNDS = 6


@contextmanager
def running_server(db_url: str, log: Path) -> Iterator[Server]:
    """``plantstore serve`` on a fresh database, with the token it issues at its first start."""
    server = start_server(db_url, log, None, **SERVER_ENV)
    try:
        yield server
    finally:
        server.stop()


def issued_cursor(server: Server) -> str:
    """A real cursor for the run's user: no generator can forge one (see schemathesis.toml)."""
    headers = {"Authorization": f"Bearer {server.token}", "Content-Type": "application/json"}
    for plant_id in (1, 2):
        body = json.dumps({"id": plant_id, "name": "seed"}).encode()
        request = urllib.request.Request(f"{server.base_url}/plants", body, headers)
        urllib.request.urlopen(request, timeout=10).read()
    request = urllib.request.Request(f"{server.base_url}/plants?limit=1", headers=headers)
    with urllib.request.urlopen(request, timeout=10) as response:
        link = response.headers["link"]
    return str(link.split("cursor=", 1)[1].split(">", 1)[0])


@dataclass
class RoundResult:
    generated: int
    requests: int
    failures: list[str]
    exit_code: int
    summary: str
    warnings: list[str] = field(default_factory=list)


def schemathesis_round(
    server: Server, cursor: str, max_examples: int, seed: int, workers: int, directory: Path
) -> RoundResult:
    directory.mkdir(parents=True)
    command = [
        str(SCHEMATHESIS),
        "--config-file",
        str(SCHEMATHESIS_CONFIG),
        "--no-color",
        "run",
        f"{server.base_url}/openapi.json",
        "--header",
        f"Authorization: Bearer {server.token}",
        "--checks",
        "all",
        "--phases",
        "examples,coverage,fuzzing,stateful",
        "--max-examples",
        str(max_examples),
        "--seed",
        str(seed),
        "--workers",
        str(workers),
        "--report",
        "json,ndjson",
        "--report-json-path",
        str(directory / "report.json"),
        "--report-ndjson-path",
        str(directory / "events.ndjson"),
    ]
    env = {
        **os.environ,
        "PLANTSTORE_TEST_CURSOR": cursor,
        "SCHEMATHESIS_HOOKS": SCHEMATHESIS_HOOKS,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    with (directory / "output.txt").open("w") as out:
        process = subprocess.run(
            command, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=directory, check=False
        )
    output = (directory / "output.txt").read_text()
    summary = output[output.rfind("=== SUMMARY ===") :] if "SUMMARY" in output else output
    summary = summary[summary.find("\n", summary.find("SUMMARY")) :].strip("\n")
    try:
        report = json.loads((directory / "report.json").read_text())
    except (OSError, ValueError):
        failure = (
            f"schemathesis wrote no JSON report (exit {process.returncode}):\n{output[-3000:]}"
        )
        return RoundResult(0, 0, [failure], process.returncode, summary)
    failures = [describe_failure(f) for f in report.get("failures", [])]
    failures += [f"error: {json.dumps(e)[:2000]}" for e in report.get("errors", [])]
    if process.returncode != 0 and not failures:
        failures.append(f"schemathesis exited {process.returncode}:\n{output[-3000:]}")
    warnings = [
        f"{kind}: {json.dumps(found)[:500]}"
        for kind, found in (report.get("warnings") or {}).items()
        if found
    ]
    return RoundResult(
        generated=int(report["test_cases"]["generated"]),
        requests=recorded_requests(directory / "events.ndjson"),
        failures=failures,
        exit_code=process.returncode,
        summary=summary,
        warnings=warnings,
    )


def describe_failure(failure: object) -> str:
    """One failure of the JSON report, shortened; its whole record stays in the report."""
    text = json.dumps(failure, ensure_ascii=False)
    return text if len(text) <= 3000 else text[:3000] + " ..."


def recorded_requests(ndjson: Path) -> int:
    """The HTTP requests the event stream records (every scenario's interactions)."""
    total = 0
    with ndjson.open() as events:
        for line in events:
            if '"ScenarioFinished"' in line[:40]:
                recorder = json.loads(line)["ScenarioFinished"]["recorder"]
                total += len(recorder.get("interactions", {}))
    return total


def schemathesis_backend(
    backend: str, db_url: str, args: argparse.Namespace, directory: Path
) -> Row:
    row = Row("schemathesis", backend)
    directory.mkdir(parents=True)
    print(f"\n== schemathesis on {backend}: at least {args.requests:,} requests", flush=True)
    try:
        run_rounds(row, db_url, args, directory)
    except (RuntimeError, OSError) as exc:  # the server did not start, or did not answer
        row.failures.append(f"{type(exc).__name__}: {exc}")
        print(indent(row.failures[-1]), flush=True)
    if row.count < args.requests:
        row.failures.append(f"only {row.count:,} test cases, {args.requests:,} wanted")
    log_path = directory / "server.log"
    log = log_path.read_text(errors="replace") if log_path.exists() else ""
    faults = [line for line in log.splitlines() if "unexpected fault" in line]
    if faults:
        row.failures.append(f"the server logged {len(faults)} faults, first: {faults[0]}")
    return row


def run_rounds(row: Row, db_url: str, args: argparse.Namespace, directory: Path) -> None:
    with running_server(db_url, directory / "server.log") as server:
        cursor = issued_cursor(server)
        requests = 0
        for number in range(MAX_ROUNDS):
            remaining = args.requests - row.count
            if remaining <= 0:
                break
            max_examples = max(10, math.ceil(remaining * EXAMPLES_PER_REQUEST * 1.05))
            seed = args.seed + number
            started = time.monotonic()
            result = schemathesis_round(
                server, cursor, max_examples, seed, args.workers, directory / f"round-{number}"
            )
            row.count += result.generated
            requests += result.requests
            row.failures += result.failures
            print(
                f"-- round {number + 1}: --max-examples {max_examples} --seed {seed}: "
                f"{result.generated:,} test cases generated, {result.requests:,} requests "
                f"recorded, {len(result.failures)} failures, exit {result.exit_code}, "
                f"{time.monotonic() - started:.0f} s",
                flush=True,
            )
            print(indent(result.summary), flush=True)
            for warning in result.warnings:  # not failures, but worth a look
                print(indent(f"schemathesis warning: {warning}"), flush=True)
            if result.generated == 0:
                break  # schemathesis could not run: more rounds would not either
        row.note = f"{requests:,} requests recorded"


def schemathesis_rows(args: argparse.Namespace, work: Path) -> list[Row]:
    """One row per backend: SQLite in a fresh file, then PostgreSQL in a scratch database
    unless --skip-postgres (a row with the reason when it cannot be had)."""
    rows: list[Row] = []
    url = f"sqlite:///{work / 'schemathesis-sqlite' / 'plantstore.db'}"
    rows.append(schemathesis_backend("sqlite", url, args, work / "schemathesis-sqlite"))
    if not args.skip_postgres:
        with ExitStack() as stack:
            try:
                pg_url = stack.enter_context(postgres_database(args.postgres))
            except Exception as exc:  # unreachable, refused, no such role: all say the same
                reason = f"no PostgreSQL database ({type(exc).__name__}: {exc})"
                rows.append(Row("schemathesis", "postgres", failures=[reason]))
                print(f"\n== schemathesis on postgres: {reason}; --skip-postgres?")
            else:
                directory = work / "schemathesis-postgres"
                rows.append(schemathesis_backend("postgres", pg_url, args, directory))
    return rows


def print_failures(rows: list[Row]) -> None:
    """Every schemathesis failure in full, by backend."""
    for row in rows:
        if row.phase == "schemathesis" and row.failures:
            print(f"\n== schemathesis failures on {row.target}")
            for failure in row.failures:
                print(indent(failure))
