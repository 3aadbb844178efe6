"""`make slow-clients`: normal traffic while slowhttptest holds 500 slow connections, and
raw-socket probes of the header size limit and the header and body deadlines.

One server (pinned to CPU 0) on a freshly seeded SQLite file. wrk (pinned to CPU 1) measures
list 10 throughput with no slow clients, then while slowhttptest (also on CPU 1) holds
``--slow-connections`` connections in slowloris mode (``-H``: headers never finished, GET
/plants), again with none, then in slow body mode (``-B``: POST /plants, Content-Length 8192,
a few bytes every 10 s), then once more with none. Each attack's rate is judged against the
mean of the quiet runs around it (absolute rates drift on a shared VM). slowhttptest opens
each connection once; should it exit because the server closed them all, it is started
again, so the pressure lasts as long as wrk does.

Then raw sockets, each on its own connection:
  (a) a request with 17 KiB of headers: 431 or the connection closed (and, as a control,
      (a0) 15 KiB: served as usual);
  (b) headers at one byte per second: cut off within the header deadline (10 s) + margin;
  (c) headers whole, then the body at one byte per second: cut off within the body deadline
      (30 s) + margin;
  (d) Content-Length 10,000,000 and the body sent flat out: a 413 quickly, before it is all
      sent;
  (e) the same 10 MB chunked (no Content-Length): a 413 before it is all sent.

Then everything at once (``combined.py``): ``--idle-connections`` (10,000) connections
that never send a byte, reopened as the server closes them, beside both slowhttptest modes,
while wrk sends list 10 and then creates; in ``--combined-rounds`` (3) rounds between quiet
runs, each share kept reported as the median of the rounds with its range.

Targets: >= 90 % of the quiet throughput and zero errors under each attack; under everything
at once, list 10 and creates keep >= 90 % of their quiet throughput with p99 under 50 ms, and
every zero-byte connection is closed within the header deadline plus 1 s; every probe as
above. Results go to bench/results/slow-clients-<stamp>.json.

    .venv/bin/python -m bench.slow_clients [--quick] [--seconds 10] [--slow-connections 500]
        [--idle-connections 10000]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench.lib import report
from bench.lib.loads import fresh_sqlite
from bench.lib.measure import Load, Measurement, Options, measure, warm_up
from bench.lib.place import HERE
from bench.lib.seed import Layout
from bench.lib.services import LIMITS_OFF, serve_limits_off
from harness.servers import Server

from .attack import AttackResult, run_attack, show_attack
from .attacker import ATTACKS
from .combined import CombinedResult, CombinedRounds, run_combined, show_combined
from .probes import Probe, run_probes, still_serving

RESULTS = HERE / "results"
RETAINED_TARGET = 0.90
P99_TARGET_MS = 50.0
SHIPPED_HEADER_TIMEOUT = 10.0


# --- the server ------------------------------------------------------------------------------


def serve(options: Options, url: str, token: str, args: argparse.Namespace) -> Server:
    """serve_limits_off (pinned, limits out of the way: every slow client here is unauthenticated
    and on 127.0.0.1, like wrk, so a limit on failed authentications per address would lock
    wrk out too), with the deadlines as given, if given."""
    env = {}
    if args.header_timeout is not None:
        env["PLANTSTORE_HEADER_TIMEOUT"] = str(args.header_timeout)
    if args.body_timeout is not None:
        env["PLANTSTORE_BODY_TIMEOUT"] = str(args.body_timeout)
    return serve_limits_off(options, "slow-clients", url, token, **env)


# --- report ----------------------------------------------------------------------------------


def combined_verdicts(result: CombinedRounds, deadline: float) -> list[report.Verdict]:
    found = []
    rounds = len(result.rounds)
    for load in result.rounds[0].loaded:
        median, lowest, highest = result.retained(load)
        found.append(
            report.Verdict(
                f"all at once, {load}: throughput",
                f">= {100 * RETAINED_TARGET:.0f}% of quiet",
                f"{100 * median:.0f}% [{100 * lowest:.0f}-{100 * highest:.0f}], {rounds} rounds",
                median >= RETAINED_TARGET,
                settled=(lowest >= RETAINED_TARGET) == (highest >= RETAINED_TARGET),
            )
        )
        p99 = result.p99_ms(load)
        found.append(
            report.Verdict(
                f"all at once, {load}: p99",
                f"< {P99_TARGET_MS:g} ms",
                f"{p99:.1f} ms (the worst round)",
                p99 < P99_TARGET_MS,
            )
        )
    longest = result.longest_idle_s()
    found.append(
        report.Verdict(
            "zero-byte connections closed",
            f"within {deadline + 1:g} s",
            "not all" if longest is None else f"longest {longest} s",
            longest is not None and longest <= deadline + 1,
        )
    )
    return found


def verdicts(attacks: list[AttackResult], probes: list[Probe]) -> list[report.Verdict]:
    found = []
    for result in attacks:
        found.append(
            report.Verdict(
                f"{result.key}: throughput",
                f">= {100 * RETAINED_TARGET:.0f}% of quiet",
                f"{100 * result.retained:.0f}%",
                result.retained >= RETAINED_TARGET,
            )
        )
        found.append(
            report.Verdict(f"{result.key}: errors", "0", f"{result.errors}", result.errors == 0)
        )
    found += [
        report.Verdict(probe.name, probe.goal, probe.outcome, probe.passed) for probe in probes
    ]
    return found


def combined_round(result: CombinedResult) -> dict[str, Any]:
    return {
        "quiet_before": {k: m.as_json() for k, m in result.quiet_before.items()},
        "loaded": {k: m.as_json() for k, m in result.loaded.items()},
        "quiet_after": {k: m.as_json() for k, m in result.quiet_after.items()},
        "retained": {k: result.retained(k) for k in result.loaded},
        "idle": result.idle_summary,
        "slow_held": result.slow_held,
        "rss_quiet_mb": result.rss_quiet_mb,
        "rss_idle_mb": result.rss_idle_mb,
        "kb_per_idle_connection": result.kb_per_idle_connection(),
    }


# --- the run ---------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.slow_clients", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--quick", action="store_true", help="5-s wrk runs, fewer seeded rows")
    parser.add_argument("--seconds", type=int, default=None, help="per wrk run (default 10)")
    parser.add_argument("--slow-connections", type=int, default=500)
    parser.add_argument("--connections", type=int, default=32, help="wrk's")
    parser.add_argument("--users", type=int, default=None, help="seeded users (default 100)")
    parser.add_argument("--server-cpus", default="0")
    parser.add_argument("--wrk-cpus", default="1", help="taskset list for wrk")
    parser.add_argument("--attacker-cpus", default="1", help="taskset list for slowhttptest")
    parser.add_argument(
        "--header-timeout",
        type=float,
        default=None,
        help="set PLANTSTORE_HEADER_TIMEOUT and judge (b) by it (default: the server's, 10)",
    )
    parser.add_argument(
        "--body-timeout",
        type=float,
        default=None,
        help="set PLANTSTORE_BODY_TIMEOUT and judge (c) by it (default: the server's, 30)",
    )
    parser.add_argument("--margin", type=float, default=2.0, help="past a deadline (s)")
    parser.add_argument(
        "--observe", type=float, default=None, help="how long (b) and (c) are watched (s)"
    )
    parser.add_argument("--quick-413", type=float, default=2.0, help="(d)/(e) time limit (s)")
    parser.add_argument("--idle-connections", type=int, default=10_000)
    parser.add_argument("--skip-combined", action="store_true", help="no everything-at-once")
    parser.add_argument(
        "--combined-rounds", type=int, default=None, help="of everything at once (default 3)"
    )
    parser.add_argument("--skip-attacks", action="store_true", help="probes only")
    parser.add_argument("--skip-probes", action="store_true", help="slowhttptest only")
    parser.add_argument("--results", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    args.seconds = args.seconds or (5 if args.quick else 10)
    args.users = args.users if args.users is not None else (10 if args.quick else 100)
    args.combined_rounds = args.combined_rounds or (1 if args.quick else 3)
    return args


def attacks_phase(
    server: Server, options: Options, args: argparse.Namespace
) -> tuple[list[Measurement], list[AttackResult]]:
    """Quiet, attack, quiet, attack, quiet: each attack judged by the quiet runs beside it."""
    quiet = [measure(server, Load(), options, "quiet_1", "list 10, no slow clients")]
    attacks: list[AttackResult] = []
    for number, attack in enumerate(ATTACKS, 2):
        result = run_attack(attack, server, options, args)
        time.sleep(1.0)
        quiet.append(
            measure(server, Load(), options, f"quiet_{number}", "list 10, no slow clients")
        )
        result.quiet = quiet[-2:]
        rates = [m.result.rate for m in result.quiet if m.result is not None]
        result.quiet_rate = sum(rates) / len(rates) if rates else 0.0
        attacks.append(result)
        show_attack(result, (quiet[-2], quiet[-1]))
        print(flush=True)
    return quiet, attacks


def main() -> None:
    args = parse_args()
    stamp, load_before = report.begin_run(
        {"wrk": "wrk", "taskset": "util-linux", "slowhttptest": "slowhttptest"}, args.results
    )
    started = time.monotonic()
    quiet: list[Measurement] = []
    attacks: list[AttackResult] = []
    probes: list[Probe] = []
    combined: CombinedRounds | None = None
    deadline = args.header_timeout or SHIPPED_HEADER_TIMEOUT
    with tempfile.TemporaryDirectory(dir=args.results, prefix=".slow-") as directory:
        options = Options(
            seconds=args.seconds,
            connections=args.connections,
            server_cpus=args.server_cpus,
            wrk_cpus=args.wrk_cpus,
            workdir=Path(directory),
        )
        url, token = fresh_sqlite(options, "slow", Layout.for_run(args.users, 100, 0))
        server = serve(options, url, token, args)
        try:
            warm_up(server, options)
            if not args.skip_attacks:
                print(
                    f"list 10 with wrk ({args.connections} connections, {args.seconds}s, "
                    f"CPU {args.wrk_cpus}); server on CPU {args.server_cpus}; slowhttptest on "
                    f"CPU {args.attacker_cpus}",
                    flush=True,
                )
                quiet, attacks = attacks_phase(server, options, args)
            if not args.skip_combined:
                print("everything at once:", flush=True)
                combined = run_combined(server, options, args)
                show_combined(combined, deadline)
            if not args.skip_probes:
                print("probes (raw sockets, one connection each):", flush=True)
                probes = run_probes(server, args)
            serving = still_serving(server)
            server_log = (options.workdir / "slow-clients.log").read_text(errors="replace")
        finally:
            server.stop()
    found = verdicts(attacks, probes)
    if combined is not None:
        found += combined_verdicts(combined, deadline)
    print("\ntargets:")
    for verdict in found:
        print(verdict.text(36, 30))
    print(f"afterwards, a list 10 request got: {serving}")
    print(f"load average: {load_before:.2f} before, {report.load_average():.2f} after")
    payload: dict[str, Any] = {
        "started_utc": stamp,
        "duration_s": round(time.monotonic() - started, 1),
        "code": report.code_version(),
        "machine": report.machine(),
        "load_average": {"before": load_before, "after": report.load_average()},
        "settings": {
            **{k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
            "server_env": LIMITS_OFF,
        },
        "quiet": [m.as_json() for m in quiet],
        "attacks": [
            {
                **{k: v for k, v in asdict(a).items() if k not in ("measurement", "quiet")},
                "measurement": a.measurement.as_json(),
                "cpu_cost": a.cpu_cost(),
                "retained": a.retained,
                "errors": a.errors,
                "held_in_window": a.held_in_window(),
            }
            for a in attacks
        ],
        "probes": [asdict(probe) for probe in probes],
        "combined": None
        if combined is None
        else {
            "rounds": [combined_round(result) for result in combined.rounds],
            "retained": {k: combined.retained(k) for k in combined.rounds[0].loaded},
            "kb_per_idle_connection": combined.kb_per_idle_connection(),
        },
        "targets": [asdict(verdict) for verdict in found],
        "passed": all(verdict.passed for verdict in found),
        "after": serving,
        "server_log_tail": server_log.splitlines()[-30:],
    }
    path = args.results / f"slow-clients-{stamp}.json"
    path.write_text(json.dumps(payload, indent=2, default=str) + "\n")
    print(f"\nwritten: {path}")


if __name__ == "__main__":
    main()
