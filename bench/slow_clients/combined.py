"""Everything at once: ``--idle-connections`` connections that never send a byte (reopened as
the server closes them), slowhttptest's slow headers and slow bodies (``--slow-connections``
each), and, meanwhile, list 10 and creates from wrk. Judged against quiet runs of the same
two loads just before and just after: throughput kept, p99, every zero-byte connection
closed within the header deadline plus 1 s, and the worker's memory per idle connection.

On two cores the attackers share the load generator's core. They run at the lowest CPU
priority (``nice 19``), so that a reply to wrk is read as soon as it arrives rather than after
an attacker's time slice: what is measured is the server under the attack, not wrk starved of
its core. The attackers need little CPU (their connections sit), and still hold their counts.

One run's quiet rate moves by several percent between the quiet runs around an attack, so the
phase runs in ``--combined-rounds`` rounds (3): quiet, everything at once, quiet, everything
at once, …, quiet. Each round is judged against the quiet runs on either side of it, and a
share kept is reported as the median of the rounds with their range.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.lib.loads import creates
from bench.lib.measure import Load, Measurement, Options, measure
from harness.procstat import cpu_list, rss_mb, worker_pids
from harness.servers import Server, pinned

from .attacker import ATTACKS, Attacker

HERE = Path(__file__).parent
LOADS = {"list 10": Load(), "create": creates(5 * 10**12)}


@dataclass
class CombinedResult:
    """One round: the quiet runs either side of it, and the loads under it all."""

    quiet_before: dict[str, Measurement]
    loaded: dict[str, Measurement]
    quiet_after: dict[str, Measurement]
    idle_held: int
    idle_summary: dict[str, Any]
    rss_quiet_mb: float
    rss_idle_mb: float
    slow_held: dict[str, int] = field(default_factory=dict)

    def retained(self, load: str) -> float:
        quiet = [
            m.result.rate for m in (self.quiet_before[load], self.quiet_after[load]) if m.result
        ]
        loaded = self.loaded[load].result
        return loaded.rate / (sum(quiet) / len(quiet)) if loaded and quiet else 0.0

    def p99_ms(self, load: str) -> float:
        result = self.loaded[load].result
        return result.p99_ms if result else float("inf")

    def kb_per_idle_connection(self) -> float:
        held = max(1, self.idle_held)
        return (self.rss_idle_mb - self.rss_quiet_mb) * 1024 / held


@dataclass
class CombinedRounds:
    """Every round of the phase, and their figures over the rounds."""

    rounds: list[CombinedResult]

    def retained(self, load: str) -> tuple[float, float, float]:
        """The share of the quiet rate kept: median, lowest and highest of the rounds."""
        kept = [result.retained(load) for result in self.rounds]
        return statistics.median(kept), min(kept), max(kept)

    def p99_ms(self, load: str) -> float:
        """The worst round's."""
        return max(result.p99_ms(load) for result in self.rounds)

    def longest_idle_s(self) -> float | None:
        """The longest a zero-byte connection lived, in any round (None: a round saw none
        closed)."""
        found = [r.idle_summary.get("longest_s") for r in self.rounds]
        lived = [seconds for seconds in found if seconds is not None]
        return max(lived) if len(lived) == len(found) else None

    def kb_per_idle_connection(self) -> float:
        return statistics.median(result.kb_per_idle_connection() for result in self.rounds)


class IdleFlood:
    """``idle.py`` as its own process, pinned beside the other attackers."""

    def __init__(self, server: Server, count: int, cpus: str | None, ramp: float) -> None:
        host, port = server.base_url.removeprefix("http://").split(":")
        command = ["nice", "-n", "19", sys.executable, str(HERE / "idle.py")]
        command += [host, port, str(count), str(ramp)]
        self.process = subprocess.Popen(
            pinned(command, cpus), stdout=subprocess.PIPE, text=True, bufsize=1
        )
        self.latest: dict[str, Any] = {}
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.latest = json.loads(line)

    def wait_until_held(self, wanted: int, limit: float) -> bool:
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            if self.latest.get("held", 0) >= wanted:
                return True
            time.sleep(0.2)
        return False

    def stop(self) -> dict[str, Any]:
        self.process.terminate()
        self.process.wait(30)
        self._reader.join(5)
        return self.latest


def quiet_runs(server: Server, options: Options, step: int) -> dict[str, Measurement]:
    return {
        name: measure(server, _fresh(load, step), options, f"quiet_{step}_{name}", f"{name}, quiet")
        for name, load in LOADS.items()
    }


def _fresh(load: Load, step: int) -> Load:
    """Creates need ids of their own in each run (a repeat is no insert)."""
    if load.script != "create.lua":
        return load
    return creates(5 * 10**12 + step * 10**10)


def run_combined(server: Server, options: Options, args: argparse.Namespace) -> CombinedRounds:
    """The phase, with this process kept off the server's core (it starts and watches the
    attackers: CPU that belongs with them, not with the server)."""
    affinity = os.sched_getaffinity(0)
    if args.attacker_cpus:
        os.sched_setaffinity(0, cpu_list(args.attacker_cpus))
    try:
        workers = worker_pids(server.pid)
        quiet = quiet_runs(server, options, 0)
        rounds = []
        for number in range(1, args.combined_rounds + 1):
            print(f"  round {number} of {args.combined_rounds}", flush=True)
            result = _run_round(server, options, args, workers, quiet, number)
            quiet = result.quiet_after
            rounds.append(result)
        return CombinedRounds(rounds)
    finally:
        os.sched_setaffinity(0, affinity)


def _run_round(
    server: Server,
    options: Options,
    args: argparse.Namespace,
    workers: list[int],
    before: dict[str, Measurement],
    number: int,
) -> CombinedResult:
    """Everything at once, then the quiet runs after it (the next round's before)."""
    rss_quiet = rss_mb(workers)
    print(f"    opening {args.idle_connections:,} connections that send nothing", flush=True)
    # Opened over one header deadline: the server then closes (and the flood reopens) a
    # steady tenth of them each second, as connections that arrive over time would be.
    ramp = args.header_timeout or 10.0
    flood = IdleFlood(server, args.idle_connections, args.attacker_cpus, ramp)
    attackers: list[Attacker] = []
    try:
        if not flood.wait_until_held(args.idle_connections, ramp + 60):
            print(f"    the flood holds only {flood.latest.get('held')}", flush=True)
        time.sleep(1.0)
        rss_idle = rss_mb(workers)
        attackers = [
            Attacker(attack, server, args, options.workdir, sample=False, nice=True)
            for attack in ATTACKS
        ]
        for attacker in attackers:
            attacker.start()
        for attacker in attackers:
            attacker.wait_until_held(round(0.98 * args.slow_connections), 20.0)
        held = {a.attack.key: a.held() for a in attackers}
        print(f"    holding {flood.latest.get('held')} idle and slow {held}", flush=True)
        loaded = {
            name: measure(
                server,
                _fresh(load, 2 * number - 1),
                options,
                f"combined_{number}_{name}",
                f"{name} under it all",
            )
            for name, load in LOADS.items()
        }
    finally:
        for attacker in attackers:
            attacker.stop()
        summary = flood.stop()
    time.sleep(1.0)
    after = quiet_runs(server, options, 2 * number)
    return CombinedResult(
        before, loaded, after, summary.get("held", 0), summary, rss_quiet, rss_idle, held
    )


def show_combined(result: CombinedRounds, header_deadline: float) -> None:
    print("\neverything at once: idle connections, slow headers, slow bodies")
    for number, round_result in enumerate(result.rounds, 1):
        for load in LOADS:
            loaded = round_result.loaded[load].result
            if loaded is None:
                continue
            print(
                f"  round {number}, {load}: {loaded.rate:,.0f} req/s, "
                f"{100 * round_result.retained(load):.0f}% of quiet; p50 {loaded.p50}, "
                f"p99 {loaded.p99}; errors {loaded.errors} non-2xx + "
                f"{loaded.socket_errors} socket"
            )
        summary = round_result.idle_summary
        print(
            f"  round {number}, idle connections: {round_result.idle_held:,} held; the server "
            f"closed {summary.get('closed_by_server', 0):,}, the longest after "
            f"{summary.get('longest_s')} s (deadline {header_deadline:g} s); median "
            f"{summary.get('median_s')} s; worker RSS {round_result.rss_quiet_mb:.1f} MB quiet, "
            f"{round_result.rss_idle_mb:.1f} MB with them: "
            f"{round_result.kb_per_idle_connection():.1f} KB each"
        )
    for load in LOADS:
        median, lowest, highest = result.retained(load)
        print(
            f"  {load}: {100 * median:.0f}% of quiet [{100 * lowest:.0f}-{100 * highest:.0f}] "
            f"over {len(result.rounds)} rounds"
        )
