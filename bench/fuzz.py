"""Bad input at volume: schemathesis against a real server, then atheris on request parsing.

1. schemathesis. For each backend (SQLite in a fresh temporary file; PostgreSQL in a fresh
   database on --postgres, dropped afterwards) a real ``plantstore serve`` runs with the
   rate limits out of reach, and ``schemathesis run`` tests its own /openapi.json with every
   check and every phase (examples, coverage, fuzzing, stateful) until schemathesis's JSON
   report counts at least --requests generated test cases (one request each, as its NDJSON
   event log confirms): one run, then more runs with the next seeds if that was short. Each
   run uses tests/schemathesis.toml and tests/schemathesis_hooks.py, as
   tests/test_schemathesis.py does.
2. atheris. Every harness in bench/fuzz/ runs for its share of --atheris-runs executions,
   coverage-guided from its seed corpus: body, content_type, query, path and headers fuzz
   the request parsers one by one, app drives the whole ASGI app. A crash is recorded with
   its input, and the harness goes on with the rest of its share, passing over inputs that
   end in a crash it has already recorded, so one run lists every distinct crash.

The summary table gives, per phase and backend or harness, the requests or executions and
the failures or crashes, then the issue's targets (10,000 requests per backend, 1,000,000
executions), met or not; the exit status is 1 if anything failed or crashed. Work files
(schemathesis reports, server logs, corpora, crash inputs) go to a temporary directory,
kept if anything failed or with --keep.

    make fuzz                                     # the full count: about 25 minutes
    make fuzz ARGS="--quick"                      # a smoke pass: about a minute
    .venv/bin/python bench/fuzz.py --skip-schemathesis --harness app --atheris-runs 1000000
    .venv/bin/python bench/fuzz/fuzz_query.py -runs=100000   # one harness, by hand
"""

from __future__ import annotations

import argparse
import base64
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from backends import postgres_database
from harness import Server, start_server

ROOT = Path(__file__).resolve().parent.parent
HARNESS_DIR = Path(__file__).resolve().parent / "fuzz"
SCHEMATHESIS_CONFIG = ROOT / "tests" / "schemathesis.toml"
SCHEMATHESIS_HOOKS = "tests.schemathesis_hooks"
SCHEMATHESIS = Path(sys.executable).with_name("schemathesis")
DEFAULT_POSTGRES = "postgresql://postgres@127.0.0.1:5432/postgres"
# Far beyond anything a fuzzer sends: this run is about input, not about the limiter; and
# the two backends' servers run side by side, so neither takes the metrics port.
SERVER_ENV = {
    "PLANTSTORE_RATE_LIMIT": "1000000/second",
    "PLANTSTORE_AUTH_FAILURE_LIMIT": "1000000/second",
    "PLANTSTORE_METRICS_ADDRESS": "off",
}
# Each harness's executions in a full run (--atheris-runs scales them all alike). On two
# idle cores the parsers run at 15,000-45,000 executions a second, so each gets a million;
# the whole app (a request through Starlette and SQLite) manages about 1,800.
HARNESS_RUNS = {
    "app": 400_000,
    "body": 1_000_000,
    "content_type": 1_000_000,
    "headers": 1_000_000,
    "path": 1_000_000,
    "query": 1_000_000,
}
REQUIRED_REQUESTS = 10_000  # per backend
REQUIRED_EXECUTIONS = 1_000_000  # in all
# One --max-examples yields 2 to 5 requests over all phases (the stateful phase varies most).
EXAMPLES_PER_REQUEST = 1 / 2
MAX_ROUNDS = 6
MAX_CRASHES_PER_HARNESS = 10
SIGNATURE_MARK = "FUZZ-CRASH-SIGNATURE: "


@dataclass
class Row:
    phase: str
    target: str
    count: int = 0
    failures: list[str] = field(default_factory=list)
    note: str = ""


# --- schemathesis ------------------------------------------------------------------------


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


# --- atheris -----------------------------------------------------------------------------


@dataclass
class Crash:
    signature: str
    input_path: Path
    data: bytes
    report: str


def harness_names() -> list[str]:
    return sorted(path.stem.removeprefix("fuzz_") for path in HARNESS_DIR.glob("fuzz_*.py"))


def run_harness(
    name: str, runs: int, seed: int, directory: Path, scratch: Path
) -> tuple[Row, list[Crash]]:
    """Fuzz one harness for ``runs`` executions in all, resuming past each new crash.

    Corpus, crash inputs and logs go to ``directory``; the harness's own files (the
    whole-app harness's database) to ``scratch``."""
    script = HARNESS_DIR / f"fuzz_{name}.py"
    corpus, crashes_dir = directory / "corpus", directory / "crashes"
    for path in (corpus, crashes_dir, scratch):
        path.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [sys.executable, str(script), "--write-seeds", str(corpus)],
        check=True,
        capture_output=True,
    )
    row = Row("atheris", name)
    crashes: list[Crash] = []
    started = time.monotonic()
    attempt = 0
    while row.count < runs and len(crashes) < MAX_CRASHES_PER_HARNESS:
        log = directory / f"attempt-{attempt}.log"
        known = "\n".join(crash.signature for crash in crashes)
        with log.open("w") as out:
            process = subprocess.run(
                [
                    sys.executable,
                    str(script),
                    str(corpus),
                    f"-runs={runs - row.count}",
                    f"-seed={seed + attempt}",
                    f"-artifact_prefix={crashes_dir}/",
                    "-print_final_stats=1",
                    "-timeout=60",
                    "-rss_limit_mb=4096",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                env={
                    **os.environ,
                    "PLANTSTORE_FUZZ_KNOWN": known,
                    "PLANTSTORE_FUZZ_WORKDIR": str(scratch),
                },
                cwd=directory,
                check=False,
            )
        output = log.read_text(errors="replace")
        executed = re.findall(r"stat::number_of_executed_units: (\d+)", output)
        row.count += int(executed[-1]) if executed else 0
        attempt += 1
        if process.returncode == 0:
            break
        crash = parse_crash(output, log)
        crashes.append(crash)
        row.failures.append(crash.signature)
        if SIGNATURE_MARK not in output:
            break  # not an exception to pass over: a timeout, out of memory, no start
    rate = row.count / max(time.monotonic() - started, 1e-9)
    row.note = f"{rate:,.0f} execs/s"
    return row, crashes


def parse_crash(output: str, log: Path) -> Crash:
    marks = [line for line in output.splitlines() if line.startswith(SIGNATURE_MARK)]
    written = re.findall(r"Test unit written to (\S+)", output)
    input_path = Path(written[-1]) if written else log
    data = input_path.read_bytes() if written and input_path.exists() else b""
    if marks:
        signature = marks[-1].removeprefix(SIGNATURE_MARK)
    else:
        errors = re.findall(r"ERROR: libFuzzer: ([^\n]+)", output)
        signature = errors[-1] if errors else f"harness failed; see {log}"
    start = output.rfind(SIGNATURE_MARK)
    if start < 0:
        start = max(0, output.find("==ERROR") if "==ERROR" in output else len(output) - 3000)
    start = output.find("\n", start) + 1
    end = output.find("=== Uncaught Python exception: ===", start)
    if end < 0:
        end = output.find("SUMMARY: libFuzzer", start)
    report = output[start : end if end > 0 else start + 6000].strip()
    return Crash(signature, input_path, data, report)


# --- the run -----------------------------------------------------------------------------


def compact(data: bytes, longest: int = 2000) -> str:
    """A crash input as a Python expression, runs of one byte written ``b'0' * 4300``."""
    parts: list[str] = []
    literal = bytearray()
    position = 0
    for match in re.finditer(rb"(.)\1{15,}", data, re.DOTALL):
        literal += data[position : match.start()]
        if literal:
            parts.append(repr(bytes(literal)))
            literal.clear()
        parts.append(f"{bytes(match.group(1))!r} * {len(match.group(0))}")
        position = match.end()
    literal += data[position:]
    if literal or not parts:
        parts.append(repr(bytes(literal)))
    text = " + ".join(parts)
    return text if len(text) <= longest else text[:longest] + " ... (see the input file)"


def indent(text: str, prefix: str = "   ") -> str:
    return "\n".join(prefix + line if line else line for line in text.splitlines())


def print_table(rows: list[Row]) -> None:
    print("\n== summary")
    header = f"{'phase':<14}{'backend/harness':<17}{'requests/execs':>16}{'failures':>10}  notes"
    print(header)
    print("-" * len(header))
    for row in rows:
        print(f"{row.phase:<14}{row.target:<17}{row.count:>16,}{len(row.failures):>10}  {row.note}")


def print_targets(rows: list[Row]) -> None:
    """The issue's volume targets, met or not, as this run counted them."""
    backends = [row for row in rows if row.phase == "schemathesis"]
    harnesses = [row for row in rows if row.phase == "atheris"]
    if backends:
        volume = ", ".join(f"{row.target} {row.count:,}" for row in backends)
        met = all(row.count >= REQUIRED_REQUESTS for row in backends)
        failures = sum(len(row.failures) for row in backends)
        print(
            f"schemathesis: >= {REQUIRED_REQUESTS:,} requests per backend: "
            f"{'met' if met else 'NOT met'} ({volume}); {failures} failures"
        )
    if harnesses:
        executions = sum(row.count for row in harnesses)
        crashes = sum(len(row.failures) for row in harnesses)
        met = executions >= REQUIRED_EXECUTIONS
        print(
            f"atheris: >= {REQUIRED_EXECUTIONS:,} executions: {'met' if met else 'NOT met'} "
            f"({executions:,} over {len(harnesses)} harnesses); {crashes} crashes"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smoke pass: few requests/runs")
    parser.add_argument("--skip-postgres", action="store_true")
    parser.add_argument("--skip-schemathesis", action="store_true")
    parser.add_argument("--skip-atheris", action="store_true")
    parser.add_argument("--postgres", default=DEFAULT_POSTGRES, help="an admin URL")
    parser.add_argument("--requests", type=int, help="per backend (default 10,000)")
    parser.add_argument(
        "--atheris-runs",
        type=int,
        help=f"in all, shared as in HARNESS_RUNS (default {sum(HARNESS_RUNS.values()):,})",
    )
    parser.add_argument(
        "--harness", action="append", choices=harness_names(), help="only these (repeatable)"
    )
    parser.add_argument("--workers", type=int, default=1, help="schemathesis workers")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2, help="harnesses at once")
    parser.add_argument("--seed", type=int, default=20261121)
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args()
    if args.requests is None:
        args.requests = 300 if args.quick else REQUIRED_REQUESTS
    if args.atheris_runs is None:
        args.atheris_runs = 30_000 if args.quick else sum(HARNESS_RUNS.values())
    harnesses = args.harness or harness_names()

    work = Path(tempfile.mkdtemp(prefix="plantstore-fuzz-"))
    print(f"work directory: {work}", flush=True)
    started = time.monotonic()
    rows: list[Row] = []
    all_crashes: dict[str, list[Crash]] = {}

    if not args.skip_schemathesis:
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

    if not args.skip_atheris:
        weights = {name: HARNESS_RUNS.get(name, 250_000) for name in harnesses}
        budgets = {
            name: max(1, round(args.atheris_runs * weight / sum(weights.values())))
            for name, weight in weights.items()
        }
        print(f"\n== atheris: {sum(budgets.values()):,} executions in all", flush=True)
        # The RAM disk, where there is one, spares the whole-app harness's SQLite fsyncs.
        shm = Path("/dev/shm")
        scratch = Path(
            tempfile.mkdtemp(prefix="plantstore-fuzz-", dir=shm if shm.is_dir() else work)
        )

        def one(name: str) -> tuple[Row, list[Crash]]:
            row, crashes = run_harness(
                name, budgets[name], args.seed, work / "atheris" / name, scratch / name
            )
            print(
                f"-- {name}: {row.count:,} executions ({row.note}), {len(crashes)} crashes",
                flush=True,
            )
            return row, crashes

        # The slowest first (app, then query, slowed by passing over long-number crashes),
        # so that the jobs finish together rather than one alone.
        ordered = sorted(harnesses, key=lambda name: (name not in ("app", "query"), name))
        try:
            with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
                for (row, crashes), name in zip(pool.map(one, ordered), ordered, strict=True):
                    rows.append(row)
                    all_crashes[name] = crashes
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    failed = any(row.failures for row in rows)
    for row in rows:
        if row.phase == "schemathesis" and row.failures:
            print(f"\n== schemathesis failures on {row.target}")
            for failure in row.failures:
                print(indent(failure))
    for name, crashes in all_crashes.items():
        for crash in crashes:
            print(f"\n== atheris crash in {name}: {crash.signature}")
            print(f"   input ({len(crash.data):,} bytes, {crash.input_path}):")
            print(indent(compact(crash.data)))
            if len(crash.data) <= 512:
                print(indent("base64: " + base64.b64encode(crash.data).decode()))
            lines = crash.report.splitlines()[-40:]
            print(
                indent(
                    "\n".join(line[:300] + (" ..." if len(line) > 300 else "") for line in lines)
                )
            )
    print_table(rows)
    print_targets(rows)
    minutes = (time.monotonic() - started) / 60
    print(f"\n{'FAILED' if failed else 'passed'} in {minutes:.1f} minutes")
    if failed or args.keep:
        print(f"work files kept in {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
