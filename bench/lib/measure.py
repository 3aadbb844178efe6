"""One scenario against one running server: wrk's figures plus what the server spent.

CPU per request is the server tree's utime+stime over the wrk run divided by the requests wrk
completed, so a change that makes each request cheaper shows even where wrk, not the server,
limits the rate.
"""

from __future__ import annotations

import resource
import statistics
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from harness.procstat import (
    context_switches,
    core_busy_seconds,
    cpu_list,
    cpu_seconds,
    peak_rss_mb,
    pids_named,
    process_tree,
    runqueue_wait_seconds,
)
from harness.servers import Server

from . import pyspy
from .wrk import WrkResult, run_wrk

LIST_10 = "/plants?limit=10"


@dataclass(frozen=True)
class Options:
    """How every scenario of this run is driven."""

    seconds: int
    connections: int
    server_cpus: str | None
    wrk_cpus: str | None
    workdir: Path
    profile_dir: Path | None = None  # set by --profile
    reference_loop: str = "asyncio"  # granian's --loop for the reference app: the service's
    stamp: str = ""


@dataclass(frozen=True)
class Load:
    """What wrk sends: a path, optionally a script, and the script's parameters."""

    path: str = LIST_10
    script: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    profile: bool = False  # sample the server with py-spy when --profile is on


@dataclass
class Measurement:
    """One row of the report; ``result`` is None when the scenario was not run."""

    key: str
    scenario: str
    result: WrkResult | None
    cpu_us_per_request: float | None = None
    peak_rss_mb: float | None = None
    other_cpu_share: float | None = None  # of the server's cores, taken by anything else
    wrk_cpu_us_per_request: float | None = None
    context_switches_per_request: float | None = None  # the server's threads, all processes
    runqueue_wait_us_per_request: float | None = None  # its threads runnable, waiting for a core
    postgres_cpu_us_per_request: float | None = None  # PostgreSQL's own processes, all of them
    pinned: bool = True
    stored_plants: int | None = None  # rows in the plants table, where it matters (paced list)
    note: str = ""
    profiles: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["result"] = None if self.result is None else asdict(self.result)
        return data


def warm_up(server: Server, options: Options, pinned: bool = True) -> None:
    """A second of list traffic first, so no scenario pays for imports and a cold cache."""
    wrk_cpus = options.wrk_cpus if pinned else None
    run_wrk(server.base_url + LIST_10, server.token, 1, options.connections, wrk_cpus, None)


QUIET_SHARE = 0.15  # of a core, busy with anything (the idle server costs next to nothing)
QUIET_WAIT_S = 30.0


def wait_for_quiet(cores: list[int]) -> None:
    """Before a phase, wait until the cores it pins to are idle (half-second looks), for up
    to ``QUIET_WAIT_S``; say so when they never were, so a figure taken anyway is flagged."""
    if not cores:
        return
    deadline = time.monotonic() + QUIET_WAIT_S
    while True:
        before = core_busy_seconds(cores)
        time.sleep(0.5)
        busy = (core_busy_seconds(cores) - before) / (0.5 * len(cores))
        if busy <= QUIET_SHARE:
            return
        if time.monotonic() > deadline:
            print(f"    cores {cores} still {100 * busy:.0f}% busy: measuring anyway", flush=True)
            return


def measure(
    server: Server, load: Load, options: Options, key: str, label: str, pinned: bool = True
) -> Measurement:
    """Run ``load`` for the run's seconds; CPU and peak RSS over the server's process tree."""
    print(f"  {label} ...", flush=True)
    cores = cpu_list(options.server_cpus) if pinned and options.server_cpus else []
    wait_for_quiet(cores + (cpu_list(options.wrk_cpus) if pinned and options.wrk_cpus else []))
    tree_before = process_tree(server.pid)
    cpu_before, busy_before = cpu_seconds(tree_before), core_busy_seconds(cores)
    switches_before = context_switches(tree_before)
    waited_before = runqueue_wait_seconds(tree_before)
    postgres_before = cpu_seconds(pids_named("postgres"))
    wrk_before = _children_cpu_seconds()
    started = time.monotonic()
    profiler, stem = None, None
    if options.profile_dir is not None and load.profile:
        stem = options.profile_dir / f"{options.stamp}-{key}"
        profiler = pyspy.start(server.pid, options.seconds, stem)
    result = run_wrk(
        server.base_url + load.path,
        server.token,
        options.seconds,
        options.connections,
        options.wrk_cpus if pinned else None,
        load.script,
        load.env,
    )
    wrk_cpu = _children_cpu_seconds() - wrk_before  # wrk is the child that ended meanwhile
    postgres_cpu = cpu_seconds(pids_named("postgres")) - postgres_before
    tree = process_tree(server.pid)
    cpu = cpu_seconds(tree) - cpu_before
    switches = context_switches(tree) - switches_before
    waited_after = runqueue_wait_seconds(tree)
    waited = None if waited_after is None or waited_before is None else waited_after - waited_before
    others = core_busy_seconds(cores) - busy_before - cpu
    wall = (time.monotonic() - started) * len(cores)
    profiles = [] if profiler is None or stem is None else pyspy.finish(profiler, stem)
    return Measurement(
        key=key,
        scenario=label,
        result=result,
        cpu_us_per_request=cpu * 1e6 / result.requests if result.requests else None,
        peak_rss_mb=peak_rss_mb(tree),
        other_cpu_share=max(0.0, others / wall) if wall else None,
        wrk_cpu_us_per_request=wrk_cpu * 1e6 / result.requests if result.requests else None,
        context_switches_per_request=switches / result.requests if result.requests else None,
        runqueue_wait_us_per_request=(
            waited * 1e6 / result.requests if result.requests and waited is not None else None
        ),
        postgres_cpu_us_per_request=(
            postgres_cpu * 1e6 / result.requests if result.requests and postgres_cpu else None
        ),
        pinned=pinned,
        profiles=[str(path) for path in profiles],
    )


def _children_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def not_run(key: str, label: str, why: str) -> Measurement:
    """A row kept in the report, so a skipped scenario is visible rather than missing."""
    return Measurement(key=key, scenario=label, result=None, pinned=False, note=f"not run: {why}")


def median_and_range(values: list[float]) -> tuple[float, float, float] | None:
    """A figure over rounds: the median, the lowest and the highest (None if none ran)."""
    if not values:
        return None
    return statistics.median(values), min(values), max(values)


def ratio_span(median: float, low: float, high: float) -> str:
    """A ratio over rounds as the targets state it: "1.23x [1.10-1.30]"."""
    return f"{median:.2f}x [{low:.2f}-{high:.2f}]"


def span_text(values: list[float], form: str = "{:.2f}") -> str:
    """A figure over rounds as a report prints it: "median [lowest-highest]", the median alone
    for one round, "-" for none."""
    found = median_and_range(values)
    if found is None:
        return "-"
    median, low, high = found
    if len(values) == 1:
        return form.format(median)
    return f"{form.format(median)} [{form.format(low)}-{form.format(high)}]"
