"""wrk, one thread, optionally pinned: a run, and its summary parsed into numbers (plus the
``schedule:`` line ``scheduled.lua`` prints, for paced runs)."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from harness.servers import pinned

LUA = Path(__file__).parent / "lua"  # wrk's scripts, named by Load.script

_UNIT_MS = {"us": 0.001, "ms": 1.0, "s": 1_000.0, "m": 60_000.0, "h": 3_600_000.0}


@dataclass
class ScheduleLatency:
    """Latency from each request's due time, not its send (``scheduled.lua``), in ms."""

    matched: int  # answers that echoed the request's origin
    unmatched: int  # answers without it: their latency is unknown
    late: int  # requests sent more than 1 ms after their slot
    p50_ms: float
    p90_ms: float
    p99_ms: float
    p999_ms: float
    max_ms: float


@dataclass
class WrkResult:
    requests: int
    seconds: float
    rate: float
    p50_ms: float  # wrk's own percentiles: from each request's send
    p99_ms: float
    errors: int  # non-2xx/3xx responses
    socket_errors: int
    schedule: ScheduleLatency | None = None  # paced runs only

    @property
    def good_rate(self) -> float:
        """Answers that were 2xx/3xx, per second: a fast error earns no credit."""
        return max(0, self.requests - self.errors) / self.seconds if self.seconds else 0.0

    @property
    def p50(self) -> str:
        return f"{self.p50_ms:.2f}ms"

    @property
    def p99(self) -> str:
        return f"{self.p99_ms:.2f}ms"


def run_wrk(
    url: str,
    token: str,
    seconds: int,
    connections: int,
    cpus: str | None,
    script: str | None,
    env: Mapping[str, str] | None = None,
) -> WrkResult:
    """One wrk run (one thread, ``--latency``); script parameters travel in ``env``."""
    command = ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "--latency"]
    command += ["-H", f"Authorization: Bearer {token}"]
    if script is not None:
        command += ["-s", str(LUA / script)]
    output = subprocess.run(
        pinned([*command, url], cpus),
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PLANTSTORE_BENCH_TOKEN": token, **(env or {})},
    ).stdout
    return parse_wrk(output)


def parse_wrk(output: str) -> WrkResult:
    """wrk's summary as numbers; latencies in milliseconds."""
    rate = re.search(r"Requests/sec:\s+([\d.]+)", output)
    total = re.search(r"(\d+) requests in ([\d.]+)(\w+)", output)
    if rate is None or total is None:
        raise RuntimeError(f"wrk printed no rate: {output}")
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", output)
    sockets = re.search(
        r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", output
    )
    return WrkResult(
        requests=int(total.group(1)),
        seconds=_duration_ms(total.group(2), total.group(3)) / 1_000,
        rate=float(rate.group(1)),
        p50_ms=_percentile_ms(output, "50"),
        p99_ms=_percentile_ms(output, "99"),
        errors=int(errors.group(1)) if errors else 0,
        socket_errors=sum(int(n) for n in sockets.groups()) if sockets else 0,
        schedule=_schedule(output),
    )


def _schedule(output: str) -> ScheduleLatency | None:
    """The ``schedule:`` line ``scheduled.lua``'s done() prints, if there is one."""
    line = next((ln for ln in output.splitlines() if ln.startswith("schedule: ")), None)
    if line is None:
        return None
    fields = dict(part.split("=", 1) for part in line.removeprefix("schedule: ").split())
    us = {key.removesuffix("_us"): float(value) / 1_000 for key, value in fields.items()}
    return ScheduleLatency(
        matched=int(fields["matched"]),
        unmatched=int(fields["unmatched"]),
        late=int(fields["late"]),
        p50_ms=us["p50"],
        p90_ms=us["p90"],
        p99_ms=us["p99"],
        p999_ms=us["p999"],
        max_ms=us["max"],
    )


def _percentile_ms(output: str, percent: str) -> float:
    match = re.search(rf"^\s+{percent}%\s+([\d.]+)(\w+)", output, re.M)
    return _duration_ms(match.group(1), match.group(2)) if match else float("nan")


def _duration_ms(number: str, unit: str) -> float:
    return float(number) * _UNIT_MS[unit]
