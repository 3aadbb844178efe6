"""One attack measured: slowhttptest up to its count, list 10 with wrk meanwhile, how soon the
server lets go of the connections afterwards; and that attack printed."""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass, field

from bench.lib.measure import Load, Measurement, Options, measure
from harness.procstat import process_tree
from harness.servers import Server

from .attacker import Attack, Attacker, AttackRun, Point, sockets_of


@dataclass
class AttackResult:
    key: str
    label: str
    quiet_rate: float
    measurement: Measurement
    held_after_s: float | None
    window: tuple[float, float]  # the wrk run, in attack seconds
    released_after_s: float | None
    idle_sockets: int
    runs: list[AttackRun] = field(default_factory=list)
    points: list[Point] = field(default_factory=list)
    quiet: list[Measurement] = field(default_factory=list)  # the quiet runs around it

    @property
    def retained(self) -> float:
        result = self.measurement.result
        return result.rate / self.quiet_rate if result and self.quiet_rate else 0.0

    @property
    def errors(self) -> int:
        result = self.measurement.result
        return result.errors + result.socket_errors if result else 0

    def held_in_window(self) -> tuple[int, float, int]:
        """Fewest, mean and most slow connections slowhttptest held while wrk ran."""
        inside = [p.attacker_sockets for p in self.points if self.inside(p.t_s)]
        if not inside:
            return (0, 0.0, 0)
        return (min(inside), sum(inside) / len(inside), max(inside))

    def cpu_cost(self) -> float | None:
        """How much more server CPU a request took under attack than in the quiet runs."""
        quiet = [m.cpu_us_per_request for m in self.quiet if m.cpu_us_per_request]
        attack = self.measurement.cpu_us_per_request
        if not quiet or not attack:
            return None
        return attack / (sum(quiet) / len(quiet)) - 1

    def inside(self, t: float) -> bool:
        return self.window[0] <= t <= self.window[1]


def run_attack(
    attack: Attack, server: Server, options: Options, args: argparse.Namespace
) -> AttackResult:
    """slowhttptest up to its connection count, then wrk; then stop it and time how long the
    server takes to let go of the connections. ``quiet_rate`` is filled in by the caller."""
    idle = sockets_of(process_tree(server.pid))
    attacker = Attacker(attack, server, args, options.workdir)
    print(f"  {attack.label}: starting slowhttptest -c {args.slow_connections}", flush=True)
    attacker.start()
    held = attacker.wait_until_held(round(0.98 * args.slow_connections), 20.0)
    if held is None:
        print("    slowhttptest never held its connections; measuring anyway", flush=True)
    else:
        print(f"    holding {args.slow_connections} after {held:.1f}s", flush=True)
    begun = attacker.now()
    row = measure(server, Load(), options, attack.key, f"list 10 during {attack.key}")
    window = (begun, attacker.now())
    attacker.stop()
    released = None
    stopped = time.monotonic()
    while time.monotonic() < stopped + 15:
        if sockets_of(process_tree(server.pid)) <= idle:
            released = time.monotonic() - stopped
            break
        time.sleep(0.2)
    return AttackResult(
        key=attack.key,
        label=attack.label,
        quiet_rate=0.0,
        measurement=row,
        held_after_s=held,
        window=window,
        released_after_s=released,
        idle_sockets=idle,
        runs=attacker.runs,
        points=attacker.points,
    )


def timeline(result: AttackResult, every: float) -> list[str]:
    """The sampler's points, thinned to one per ``every`` seconds."""
    lines = [f"      {'t s':>5} {'slow conns':>10} {'server sockets':>14} {'RSS MB':>7}"]
    shown = -every
    for point in result.points:
        if point.t_s - shown >= every:
            mark = " wrk" if result.inside(point.t_s) else ""
            lines.append(
                f"      {point.t_s:>5.0f} {point.attacker_sockets:>10} "
                f"{point.server_sockets:>14} {point.worker_rss_mb:>7.1f}{mark}"
            )
            shown = point.t_s
    return lines


def csv_summary(run: AttackRun) -> str:
    """One slowhttptest run in a line: its most connected, its last row, how it ended."""
    if not run.rows:
        return f"ran {run.started_s:.0f}-{run.ended_s:.0f}s, no CSV; exit: {run.exit_status}"
    connected = max(row.get("Connected", 0) for row in run.rows)
    last = run.rows[-1]
    unavailable = sum(1 for row in run.rows if row.get("Service Available", 1) == 0)
    return (
        f"ran {run.started_s:.0f}-{run.ended_s:.0f}s: connected up to {connected}; "
        f"at its last second ({last.get('Seconds', '?')}s) connected "
        f"{last.get('Connected', '?')}, closed {last.get('Closed', '?')}, "
        f"pending {last.get('Pending', '?')}; its probe found the service unavailable in "
        f"{unavailable} of {len(run.rows)} seconds; exit: {run.exit_status}"
    )


def cpu_text(row: Measurement) -> str:
    """Server CPU per request and the share of its core others took: what says whether a
    lower rate came from the attack or from the machine."""
    cpu = "-" if row.cpu_us_per_request is None else f"{row.cpu_us_per_request:.0f}"
    other = "-" if row.other_cpu_share is None else f"{100 * row.other_cpu_share:.0f}%"
    return f"{cpu} µs/req, other% {other}"


def show_attack(result: AttackResult, quiet: tuple[Measurement, Measurement]) -> None:
    wrk = result.measurement.result
    before, after = (m.result.rate if m.result else 0.0 for m in quiet)
    low, mean, high = result.held_in_window()
    print(f"\n{result.label}")
    if wrk is not None:
        print(
            f"  list 10: {wrk.rate:,.0f} req/s (quiet {before:,.0f} before, {after:,.0f} "
            f"after), {100 * result.retained:.0f}% retained; p50 {wrk.p50}, p99 {wrk.p99}; "
            f"errors {wrk.errors} non-2xx + {wrk.socket_errors} socket"
        )
        print(
            f"  server CPU: {cpu_text(result.measurement)} under attack; quiet "
            f"{cpu_text(quiet[0])} before, {cpu_text(quiet[1])} after"
        )
        extra = result.cpu_cost()
        if extra is not None:
            print(
                f"  CPU per request under attack {100 * extra:+.0f}% against the quiet runs "
                "(less sensitive than req/s to what else the core runs)"
            )
    held = "never" if result.held_after_s is None else f"after {result.held_after_s:.1f}s"
    released = (
        "not within 15s"
        if result.released_after_s is None
        else f"{result.released_after_s:.1f}s after slowhttptest stopped"
    )
    print(
        f"  slow connections while wrk ran: {low}-{high}, mean {mean:.0f} (first full {held}); "
        f"the server let go of them {released}"
    )
    runs = sorted(result.runs, key=lambda run: run.started_s)
    for number, run in enumerate(runs, 1):
        print(f"  slowhttptest run {number}: {csv_summary(run)}")
    print("    timeline (client-side slow connections, server-side sockets, worker RSS):")
    print("\n".join(timeline(result, 2.0)))
