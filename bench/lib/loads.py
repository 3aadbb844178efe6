"""What wrk sends in the shared scenarios (creates, deletes, the 80/10/10 mix, paced list 10),
each with id ranges of its own, and a fresh seeded SQLite file to send it to."""

from __future__ import annotations

import time
from pathlib import Path

from .measure import Load, Measurement, Options
from .seed import Layout, prepare, seed_sqlite

CREATE_IDS = 10**12  # far above every seeded id; each create run gets its own block
MIX_CREATE_IDS = 2 * 10**12
GROUP_COMMIT_OFF_IDS = 3 * 10**12
POOLED_CREATE_IDS = 4 * 10**12  # PostgreSQL's creates through PgBouncer


def creates(first_id: int, profile: bool = False) -> Load:
    """Creates from ``first_id`` up, so no run repeats another's ids (a repeat is no insert)."""
    env = {"PLANTSTORE_BENCH_ID_BASE": str(first_id)}
    return Load(script="create.lua", env=env, profile=profile)


def paced_creates(first_id: int, rate: int) -> Load:
    """Creates as ``creates``, at a fixed rate: their cost at a load that is no one's ceiling."""
    env = {"PLANTSTORE_BENCH_ID_BASE": str(first_id), "PLANTSTORE_BENCH_RATE": str(rate)}
    return Load(script="paced_create.lua", env=env)


def paced_list(rate: int) -> Load:
    """list 10 at a fixed rate, timed as wrk times it (from the send): for its CPU, not its
    tail (``paced`` is for the tail)."""
    return Load(script="paced.lua", env={"PLANTSTORE_BENCH_RATE": str(rate)})


def deletes(layout: Layout) -> Load:
    """Deletes over the seeded range, each id once, so every answer should be 204."""
    return Load(script="delete.lua", env={"PLANTSTORE_BENCH_DELETE_FROM": str(layout.delete_from)})


def mix(layout: Layout) -> Load:
    """The 80/10/10 mix, with its own create ids and its own delete range."""
    return Load(
        script="mix.lua",
        env={
            "PLANTSTORE_BENCH_ID_BASE": str(MIX_CREATE_IDS),
            "PLANTSTORE_BENCH_DELETE_FROM": str(layout.mix_delete_from),
        },
    )


def paced(rate: int) -> Load:
    """list 10 at a fixed rate: latency judged below saturation, not at it, and counted from
    each request's due time (``scheduled.lua``), so a stall is not hidden by a late send."""
    return Load(script="scheduled.lua", env={"PLANTSTORE_BENCH_RATE": str(rate)})


def fresh_sqlite(options: Options, name: str, layout: Layout) -> tuple[str, str]:
    """A migrated, seeded SQLite file; returns its URL and the bench user's token."""
    url = f"sqlite:///{options.workdir / f'{name}.db'}"
    started = time.monotonic()
    token = prepare(url)
    seed_sqlite(sqlite_path(url), layout)
    took = time.monotonic() - started
    print(f"  seeded {name}: {layout.total_plants:,} plants in {took:.1f}s", flush=True)
    return url, token


def sqlite_path(url: str) -> Path:
    return Path(url.removeprefix("sqlite:///"))


def half_rate(flat_out: Measurement) -> int:
    """The paced rate: half of what the server managed flat out."""
    return max(1, round(flat_out.result.rate / 2)) if flat_out.result else 1
