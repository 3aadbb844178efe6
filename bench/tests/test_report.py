"""The benchmark's report: its plots and its one current table, drawn from a run's JSON."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.lib import latest
from bench.speed import plots

README = Path(__file__).resolve().parents[2] / "bench" / "README.md"


def run_payload() -> dict[str, Any]:
    """A run's JSON as make bench writes it, cut down to what the report reads."""

    def target(name: str, verdict: str, ratio: list[float] | None, floor: float | None) -> Any:
        measured = "1.10x" if ratio else "9,000/s"
        goal = f">= {floor}x" if floor else ">= 8,000/s"
        return {"name": name, "goal": goal, "measured": measured, "met": verdict == "met",
                "settled": verdict != "unsettled", "ratio": ratio, "floor": floor,
                "verdict": verdict}  # fmt: skip

    def row(workers: int, scenario: str, requests: int) -> dict[str, Any]:
        result = {"requests": requests, "seconds": 10.0, "p99_ms": 2.0 * workers}
        return {"workers": workers, "scenario": scenario, "measurement": {"result": result}}

    return {
        "started_utc": "20261125T080000Z",
        "duration_s": 1800,
        "code": {"commit": "0123456789abcdef", "dirty": False},
        "machine": {"nproc": 2, "cpu": "a CPU", "python": "3.11.7", "sqlite": "3.40.1"},
        "targets": [
            target("list 10: plantstore / naive", "NOT MET", [0.8, 0.75, 0.86], 1.0),
            target("creates: plantstore / FastAPI", "met", [5.0, 4.6, 5.2], 4.0),
            target("workers 2 / 1, list | mix", "unsettled", [1.5, 1.4, 1.6], 1.5),
            target("durable creates", "met", None, None),  # not a ratio: no bar
        ],
        "sqlite_workers": {
            "rows": [
                row(1, "list10", 100_000),
                row(2, "list10", 170_000),
                row(1, "create", 90_000),
                row(2, "create", 95_000),
                row(4, "create", 85_000),
                {"workers": 2, "scenario": "mix", "measurement": {"result": None}},  # not run
            ]
        },
    }


def test_a_run_draws_both_plots_with_its_targets_and_commit(tmp_path: Path) -> None:
    written = plots.draw(run_payload(), tmp_path)
    assert [path.name for path in written] == [plots.RATIOS_SVG, plots.WORKERS_SVG]
    ratios = (tmp_path / plots.RATIOS_SVG).read_text()
    assert ratios.startswith("<?xml")
    assert "<svg" in ratios
    for text in ("0.80x (NOT MET, floor 1x)", "5.00x (met, floor 4x)", "commit 0123456"):
        assert text in ratios, text
    assert "durable creates" not in ratios  # only ratio targets are drawn
    workers = (tmp_path / plots.WORKERS_SVG).read_text()
    assert "list 10" in workers
    assert "durable creates" in workers
    assert "mix 80/10/10" not in workers  # its one row was not run


def test_the_same_run_draws_the_same_files(tmp_path: Path) -> None:
    first = [path.read_bytes() for path in plots.draw(run_payload(), tmp_path / "a")]
    second = [path.read_bytes() for path in plots.draw(run_payload(), tmp_path / "b")]
    assert first == second  # a re-run of the report changes no plot it did not change


def test_the_readme_shows_one_run_its_commit_and_every_target(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(README.read_text())
    table = latest.markdown(run_payload(), "speed-20261125T080000Z.json")
    latest.write(readme, table)
    latest.write(readme, table)  # a second run replaces the first, never adds to it
    text = readme.read_text()
    assert text.count(latest.BEGIN) == text.count(latest.END) == 1
    assert text.count("on commit `0123456`") == 1
    assert "[`results/speed-20261125T080000Z.json`](results/speed-20261125T080000Z.json)" in text
    assert "| workers 2 / 1, list / mix | >= 1.5x | 1.10x | unsettled |" in text
    assert text.count("| target | goal | measured | verdict |") == 1
    assert README.read_text().count(latest.BEGIN) == 1  # the real report holds the markers
