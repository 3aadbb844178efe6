"""Two source trees of plantstore side by side: is a change to the code no slower?

    git worktree add /tmp/before <commit>
    .venv/bin/python -m bench.trees /tmp/before/src src --rounds 3 --seconds 8

Each tree's ``plantstore serve`` (one worker unless ``--workers``, every feature on as shipped,
limits far above the load) runs alone on one pinned core with wrk on the other (with
``--unpinned``, server and wrk share the cores, as in the workers phase of ``make bench``),
on a SQLite file of its own seeded alike (the bench user's 20 plants plus 100,000 of other
users'). The trees take turns, round after round (A, B, A, B, …), so a drift of the machine
touches both; each ratio (B / A) is reported as its median and range over the rounds.
``--paced RATE`` adds list 10 at that rate, compared by its p99 from each request's due time
(lower is better there). The trees share this virtual environment: only ``PYTHONPATH`` differs.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
from dataclasses import dataclass
from pathlib import Path

from bench.lib.loads import creates, paced, sqlite_path
from bench.lib.measure import LIST_10, Load, Measurement, Options, measure, warm_up
from bench.lib.place import HERE, require_real_disk
from bench.lib.seed import Layout, prepare, seed_sqlite
from bench.lib.services import start_service
from harness.servers import Server

SCENARIOS = {"list 10": Load(path=LIST_10), "create": creates(10**12)}
PACED = "list 10 paced"  # with --paced RATE: p99 from the schedule, not a rate


@dataclass
class Tree:
    name: str
    source: Path
    database_url: str
    token: str


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.trees", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("before", type=Path, help="the first tree's src/ (A)")
    parser.add_argument("after", type=Path, help="the second tree's src/ (B)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=8, help="per scenario and tree")
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--workers", type=int, default=1, help="serve --workers")
    parser.add_argument(
        "--paced",
        type=int,
        default=0,
        help="also list 10 paced at this rate (req/s): p99 from each request's due time",
    )
    parser.add_argument(
        "--unpinned",
        action="store_true",
        help="server and wrk share every core (as several workers need), instead of one each",
    )
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="trees-", dir=HERE / "results"))
    require_real_disk(workdir)
    try:
        compare(args, workdir)
    finally:
        shutil.rmtree(workdir)


def compare(args: argparse.Namespace, workdir: Path) -> None:
    server_cpus, wrk_cpus = (None, None) if args.unpinned else ("0", "1")
    options = Options(args.seconds, args.connections, server_cpus, wrk_cpus, workdir)
    trees = [seeded(options, "A", args.before), seeded(options, "B", args.after)]
    scenarios = dict(SCENARIOS, **({PACED: paced(args.paced)} if args.paced else {}))
    rates: dict[str, dict[str, list[float]]] = {name: {"A": [], "B": []} for name in scenarios}
    cpu: dict[str, dict[str, list[float]]] = {name: {"A": [], "B": []} for name in scenarios}
    for round_number in range(1, args.rounds + 1):
        for tree in trees:
            print(f"round {round_number}, tree {tree.name} ({tree.source})", flush=True)
            measured_tree = run_tree(options, tree, round_number, args.workers, scenarios)
            for scenario, measured in measured_tree.items():
                result = measured.result
                assert result is not None
                figure = result.good_rate
                if scenario == PACED:
                    assert result.schedule is not None
                    figure = result.schedule.p99_ms
                rates[scenario][tree.name].append(figure)
                cpu[scenario][tree.name].append(measured.cpu_us_per_request or 0.0)
    report(rates, cpu, args)


def seeded(options: Options, name: str, source: Path) -> Tree:
    url = f"sqlite:///{options.workdir / f'{name}.db'}"
    token = prepare(url)
    seed_sqlite(sqlite_path(url), Layout.for_run(users=100, plants_per_user=1_000, seconds=1))
    return Tree(name, source.resolve(), url, token)


def run_tree(
    options: Options, tree: Tree, round_number: int, workers: int, scenarios: dict[str, Load]
) -> dict[str, Measurement]:
    os.environ["PYTHONPATH"] = str(tree.source)  # the server, not this script, imports it
    server: Server = start_service(
        options,
        f"{tree.name}-{round_number}",
        tree.database_url,
        tree.token,
        "--workers",
        str(workers),
    )
    try:
        warm_up(server, options)
        found = {}
        for scenario, load in scenarios.items():
            if load.script == "create.lua":  # fresh ids each time: a repeat is no insert
                base = 10**12 + (round_number * 2 + (tree.name == "B")) * 10**9
                load = creates(base)
            found[scenario] = measure(server, load, options, scenario, f"{scenario} ({tree.name})")
        return found
    finally:
        server.stop()
        del os.environ["PYTHONPATH"]


def report(
    rates: dict[str, dict[str, list[float]]],
    cpu: dict[str, dict[str, list[float]]],
    args: argparse.Namespace,
) -> None:
    print(
        f"\n{args.rounds} rounds of {args.seconds} s, {args.workers} worker(s)"
        f"{', unpinned' if args.unpinned else ''}, "
        f"A = {args.before}, B = {args.after}"
    )
    print(
        "| scenario | A req/s (median) | B req/s (median) | B / A median [range] | CPU µs/req A → B |"
    )
    print("|---|---|---|---|---|")
    for scenario in rates:
        a, b = rates[scenario]["A"], rates[scenario]["B"]
        ratios = [after / before for before, after in zip(a, b, strict=True) if before]
        cpu_a, cpu_b = statistics.median(cpu[scenario]["A"]), statistics.median(cpu[scenario]["B"])
        unit = " ms p99" if scenario == PACED else ""
        print(
            f"| {scenario} | {statistics.median(a):,.2f}{unit} | {statistics.median(b):,.2f}{unit} | "
            f"{statistics.median(ratios):.2f}x [{min(ratios):.2f}-{max(ratios):.2f}] | "
            f"{cpu_a:.0f} → {cpu_b:.0f} |"
        )
    if PACED in rates:  # a tail moves much more from run to run than a rate: every round
        by_round = {name: ", ".join(f"{p99:.2f}" for p99 in rates[PACED][name]) for name in "AB"}
        print(f"\n{PACED}, p99 by round (ms): A {by_round['A']}; B {by_round['B']}")


if __name__ == "__main__":
    main()
