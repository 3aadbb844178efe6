"""Make a run's JSON the report: its plots in docs/img and its targets in bench/README.md.

``make bench`` does this at the end of every full run; by hand, for a run already written:

    .venv/bin/python -m bench.speed.publish bench/results/speed-<stamp>.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from bench.lib import latest
from bench.lib.place import HERE

from . import plots

DOCS_IMAGES = HERE.parent / "docs" / "img"  # the plots docs/benchmarks.md shows


def publish(payload: dict[str, Any], results: Path) -> list[Path]:
    """Draw the plots and rewrite the README's latest run; the files written (commit them
    with the JSON: ``git add -f bench/results/<stamp>.json``)."""
    written = plots.draw(payload, DOCS_IMAGES)
    latest.write(HERE / "README.md", latest.markdown(payload, results.name))
    return [*written, HERE / "README.md"]


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.speed.publish", description=__doc__.splitlines()[0]
    )
    parser.add_argument("results", type=Path, help="a run's JSON from bench/results/")
    args = parser.parse_args()
    for path in publish(json.loads(args.results.read_text()), args.results):
        print(f"written: {path}")


if __name__ == "__main__":
    main()
