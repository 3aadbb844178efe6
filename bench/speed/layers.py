"""Split a py-spy recording (raw collapsed stacks) into CPU by stage of the request.

Each sample is charged to the layer of its innermost frame, so a SQLite call counts for the
store line that made it, and time in C (msgspec, hashlib) for the Python line that called it.
Samples parked in a wait (the event loop's epoll, the writer's queue, idle pool threads) are
not CPU and are left out; samples with no Python frame at all are granian's Rust threads.

    .venv/bin/python -m bench.speed.layers bench/results/<stamp>-list10-collapsed.txt [...]
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

# (stage, substring of a frame) in the order they are tried; the first that matches wins.
LAYERS = (
    ("store read (SQL and its driver)", "plantstore/db/"),
    ("store read (SQL and its driver)", "/sqlite.py"),
    ("store read (SQL and its driver)", "/postgres.py"),
    ("store read (SQL and its driver)", "asyncpg/"),
    ("rate limit", "plantstore/http/ratelimit.py"),
    ("rate limit", "plantstore/http/machine_budget.py"),
    ("auth (token, cache)", "plantstore/auth/"),
    ("metrics", "plantstore/ops/metrics.py"),
    ("metrics", "prometheus_client/"),
    ("access log", "plantstore/ops/logs.py"),
    ("access log", "logging/"),
    ("request id, timing (the observing layer)", "plantstore/ops/observe.py"),
    ("JSON (msgspec) and the response", "plantstore/http/responses.py"),
    ("rules and routes (plants)", "plantstore/plants/"),
    ("routing and parsing (plantstore/http)", "plantstore/http/"),
    ("server: Starlette", "starlette/"),
    ("server: event loop and granian's Python glue", "asyncio/"),
    ("server: event loop and granian's Python glue", "granian/"),
    ("server: event loop and granian's Python glue", "uvloop/"),
)
WAITS = ("(selectors.py", "(concurrent/futures/thread.py", "(threading.py:", "(queue.py")
WAIT_FRAMES = ("Writer._serve_batch (plantstore/db/sqlite/writer.py",)
NO_PYTHON = "server: granian's Rust runtime (no Python frame)"


def layer_of(stack: list[str]) -> str | None:
    """The layer a sample belongs to, or None when the thread was waiting."""
    frames = [f for f in stack if " (" in f and not f.startswith(("process ", "thread ("))]
    if not frames:
        return NO_PYTHON
    leaf = frames[-1]
    if any(wait in leaf for wait in WAITS) or leaf.startswith(WAIT_FRAMES):
        return None
    for frame in reversed(frames):
        for layer, marker in LAYERS:
            if marker in frame:
                return layer
    return "other Python"


def table(recording: Path, us_per_request: float | None) -> str:
    """Each stage's share of the busy samples, and its µs per request when that is known."""
    counts = split(recording.read_text())
    total = sum(counts.values()) or 1
    lines = [f"{recording.name}: {total} busy samples"]
    for layer, count in counts.most_common():
        share = count / total
        scaled = f"{share * us_per_request:8.1f} µs" if us_per_request else ""
        lines.append(f"  {share:6.1%} {scaled}  {layer}")
    return "\n".join(lines)


def split(collapsed: str) -> Counter[str]:
    counts: Counter[str] = Counter()
    for line in collapsed.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        layer = layer_of(stack.split(";"))
        if layer is not None:
            counts[layer] += int(count)
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.speed.layers", description=__doc__.splitlines()[0]
    )
    parser.add_argument("recordings", nargs="+", type=Path)
    parser.add_argument("--us-per-request", type=float, help="scale shares to µs per request")
    args = parser.parse_args()
    for recording in args.recordings:
        print(table(recording, args.us_per_request))


if __name__ == "__main__":
    main()
