"""Split a py-spy recording (raw collapsed stacks) into CPU by layer.

Each sample is charged to the layer of its innermost frame, so a SQLite call counts for the
store line that made it, and time in C (msgspec, hashlib) for the Python line that called it.
Samples parked in a wait (the event loop's epoll, the writer's queue, idle pool threads) are
not CPU and are left out; samples with no Python frame at all are granian's Rust threads.

    .venv/bin/python bench/layers.py bench/results/<stamp>-list10-collapsed.txt [...]
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

# (layer, substring of a frame) in the order they are tried; the first that matches wins.
LAYERS = (
    ("plantstore: store (SQL and its driver)", "plantstore/store/"),
    ("plantstore: auth (token hash, cache)", "plantstore/api/auth.py"),
    ("plantstore: auth (token hash, cache)", "plantstore/tokens.py"),
    ("plantstore: rules (paging, cursors, create)", "plantstore/plants.py"),
    ("plantstore: HTTP (parse, encode, respond)", "plantstore/api/"),
    ("plantstore: HTTP (parse, encode, respond)", "plantstore/schemas.py"),
    ("Starlette (request, response, middleware)", "starlette/"),
    ("asyncpg (pool, protocol)", "asyncpg/"),
    ("asyncio event loop and granian's Python glue", "asyncio/"),
    ("asyncio event loop and granian's Python glue", "granian/"),
)
WAITS = ("(selectors.py", "(concurrent/futures/thread.py", "(threading.py:", "(queue.py")
WAIT_FRAMES = ("Writer._serve_batch (plantstore/store/sqlite_writer.py",)
NO_PYTHON = "granian's Rust runtime (no Python frame)"


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
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("recordings", nargs="+", type=Path)
    parser.add_argument("--us-per-request", type=float, help="scale shares to µs per request")
    args = parser.parse_args()
    for recording in args.recordings:
        counts = split(recording.read_text())
        total = sum(counts.values()) or 1
        print(f"{recording.name}: {total} busy samples")
        for layer, count in counts.most_common():
            share = count / total
            scaled = f"{share * args.us_per_request:8.1f} µs" if args.us_per_request else ""
            print(f"  {share:6.1%} {scaled}  {layer}")


if __name__ == "__main__":
    main()
