"""The atheris harnesses of trials/fuzz/harnesses/, each for its share of the executions,
coverage-guided from its seeds, resumed past each new crash so one run lists every distinct crash."""

from __future__ import annotations

import argparse
import base64
import re
import shutil
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from . import harnesses
from .summary import Row, indent

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
MAX_CRASHES_PER_HARNESS = 10
SIGNATURE_MARK = "FUZZ-CRASH-SIGNATURE: "


@dataclass
class Crash:
    signature: str
    input_path: Path
    data: bytes
    report: str


def harness_names() -> list[str]:
    return harnesses.names()


def run_harness(
    name: str, runs: int, seed: int, directory: Path, scratch: Path
) -> tuple[Row, list[Crash]]:
    """Fuzz one harness for ``runs`` executions in all, resuming past each new crash.

    Corpus, crash inputs and logs go to ``directory``; the harness's own files (the
    whole-app harness's database) to ``scratch``."""
    command = harnesses.command(name)
    corpus, crashes_dir = directory / "corpus", directory / "crashes"
    for path in (corpus, crashes_dir, scratch):
        path.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [*command, "--write-seeds", str(corpus)],
        check=True,
        capture_output=True,
        env=harnesses.environment(),
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
                    *command,
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
                env=harnesses.environment(
                    PLANTSTORE_FUZZ_KNOWN=known, PLANTSTORE_FUZZ_WORKDIR=str(scratch)
                ),
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


def run_harnesses(
    harnesses: list[str], args: argparse.Namespace, work: Path
) -> list[tuple[str, Row, list[Crash]]]:
    """Every harness for its share of --atheris-runs, --jobs at once; in the order run."""
    found: list[tuple[str, Row, list[Crash]]] = []
    weights = {name: HARNESS_RUNS.get(name, 250_000) for name in harnesses}
    budgets = {
        name: max(1, round(args.atheris_runs * weight / sum(weights.values())))
        for name, weight in weights.items()
    }
    print(f"\n== atheris: {sum(budgets.values()):,} executions in all", flush=True)
    # The RAM disk, where there is one, spares the whole-app harness's SQLite fsyncs.
    shm = Path("/dev/shm")
    scratch = Path(tempfile.mkdtemp(prefix="plantstore-fuzz-", dir=shm if shm.is_dir() else work))

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
                found.append((name, row, crashes))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return found


def print_crashes(all_crashes: dict[str, list[Crash]]) -> None:
    """Every crash: its signature, its input (compact and, when short, base64) and the end
    of its report."""
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
