"""The report's plots, drawn from one run's JSON: every ratio target beside its floor, and the
SQLite workers' throughput and p99 by worker count. SVG, so that docs/benchmarks.md shows them
sharp and git diffs them as text.

    .venv/bin/python -m bench.speed.plots bench/results/speed-<stamp>.json [--out docs/img]
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

import matplotlib
from matplotlib.figure import Figure

matplotlib.use("Agg")  # no screen: files only
import matplotlib.pyplot as plt

from bench.lib import latest

RATIOS_SVG = "bench-ratios.svg"
WORKERS_SVG = "bench-workers.svg"
COLOURS = {"met": "#2e7d32", "unsettled": "#ef8f00", "NOT MET": "#c62828"}
SCENARIOS = {"list10": "list 10", "create": "durable creates", "mix": "mix 80/10/10"}


def draw(payload: dict[str, Any], directory: Path) -> list[Path]:
    """Both plots of the run ``payload`` into ``directory``; the files written."""
    directory.mkdir(parents=True, exist_ok=True)
    plt.rcParams["svg.hashsalt"] = "plantstore"  # the same figures give the same file
    plt.rcParams["svg.fonttype"] = "none"  # text stays text: smaller, searchable, diffable
    written = []
    for name, plot in ((RATIOS_SVG, _ratios), (WORKERS_SVG, _workers)):
        figure = plot(payload)
        if figure is None:
            continue
        path = directory / name
        figure.savefig(path, format="svg", metadata={"Date": None}, bbox_inches="tight")
        plt.close(figure)
        written.append(path)
    return written


def _ratios(payload: dict[str, Any]) -> Figure | None:
    """One row per ratio target: its median, the range of its rounds, and its floor."""
    rows = [t for t in payload.get("targets", []) if t.get("ratio") and t.get("floor")]
    if not rows:
        return None
    figure, axes = plt.subplots(figsize=(9, 0.45 * len(rows) + 1.4))
    for index, target in enumerate(reversed(rows)):
        median, low, high = target["ratio"]
        colour = COLOURS.get(target["verdict"], "#555555")
        axes.barh(index, median, color=colour, alpha=0.75, height=0.6)
        if high > low:
            axes.errorbar(
                median,
                index,
                xerr=[[median - low], [high - median]],
                color="black",
                capsize=3,
                linewidth=1,
            )
        axes.plot([target["floor"]] * 2, [index - 0.4, index + 0.4], color="black", linewidth=2)
        axes.text(
            max(median, high, target["floor"]) * 1.02,
            index,
            f"{median:.2f}x ({target['verdict']}, floor {target['floor']:g}x)",
            va="center",
            fontsize=8,
        )
    axes.set_yticks(range(len(rows)), [t["name"] for t in reversed(rows)], fontsize=8)
    axes.set_xlabel("ratio (bar: median of the rounds; whisker: their range; black tick: floor)")
    axes.set_xlim(0, max(max(t["ratio"][2], t["floor"]) for t in rows) * 1.45)
    axes.set_title(_title(payload, "ratio targets"), fontsize=10)
    return figure


def _workers(payload: dict[str, Any]) -> Figure | None:
    """Throughput and p99 of each scenario against the number of SQLite workers."""
    rows = (payload.get("sqlite_workers") or {}).get("rows", [])
    runs: dict[tuple[str, int], list[tuple[float, float]]] = {}
    for row in rows:
        result = row["measurement"].get("result")
        if result is None or row.get("writers", "each") != "each":  # the default's rows
            continue
        if row["scenario"] not in SCENARIOS:  # flat out only: a paced rate is the same at each
            continue
        rate = result["requests"] / result["seconds"] if result["seconds"] else 0.0
        runs.setdefault((row["scenario"], row["workers"]), []).append((rate, result["p99_ms"]))
    series: dict[str, list[tuple[int, float, float]]] = {}
    for (scenario, count), found in runs.items():  # the rounds' medians
        rate = statistics.median(rate for rate, _ in found)
        p99 = statistics.median(p99 for _, p99 in found)
        series.setdefault(scenario, []).append((count, rate, p99))
    if not series:
        return None
    figure, (rates, p99s) = plt.subplots(1, 2, figsize=(10, 3.6))
    for scenario, points in sorted(series.items()):
        points.sort()
        workers = [p[0] for p in points]
        label = SCENARIOS.get(scenario, scenario)
        rates.plot(workers, [p[1] for p in points], marker="o", label=label)
        p99s.plot(workers, [p[2] for p in points], marker="o", label=label)
    for axes, what in ((rates, "requests/s"), (p99s, "p99 ms (wrk, from the send)")):
        axes.set_xlabel("--workers (wrk pinned to one core, the server unpinned; rounds' median)")
        axes.set_ylabel(what)
        axes.set_xticks(sorted({w for points in series.values() for w, _, _ in points}))
        axes.set_ylim(bottom=0)
        axes.grid(alpha=0.3)
    rates.legend(fontsize=8)
    figure.suptitle(_title(payload, "SQLite, one file, by worker count"), fontsize=10)
    figure.tight_layout()
    return figure


def _title(payload: dict[str, Any], what: str) -> str:
    return f"{what}: run {payload.get('started_utc', '?')}, commit {latest.commit_of(payload)}"


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.speed.plots", description=__doc__.splitlines()[0]
    )
    parser.add_argument("results", type=Path, help="a run's JSON from bench/results/")
    parser.add_argument("--out", type=Path, default=Path(__file__).parents[2] / "docs" / "img")
    args = parser.parse_args()
    for path in draw(json.loads(args.results.read_text()), args.out):
        print(path)


if __name__ == "__main__":
    main()
