"""The sandbox phase's table and targets (speed/sandbox_phase.py measures)."""

from __future__ import annotations

from .sandbox_phase import RATES, SandboxResult
from .targets import Target


def table(result: SandboxResult) -> str:
    """Without and during, side by side: schedule p99 and max, and the purge's own figures."""
    lines = [
        f"sandbox purge: {result.users:,} expired users x {result.plants_each} plants, SQLite, "
        "another user's paced requests (latency from each request's due time)",
        f"{'load':<10} {'rate/s':>7} {'p99 without':>12} {'p99 during':>11} {'max without':>12} "
        f"{'max during':>11}  note",
    ]
    for without, during in zip(result.without, result.during, strict=True):
        name = without.key.split("_")[1]
        a = without.result.schedule if without.result else None
        b = during.result.schedule if during.result else None
        cells = [
            f"{value:.2f}ms" if value is not None else "-"
            for value in (
                a.p99_ms if a else None,
                b.p99_ms if b else None,
                a.max_ms if a else None,
                b.max_ms if b else None,
            )
        ]
        errors = sum(row.result.errors for row in (without, during) if row.result)
        note = during.note + (f"; {errors} non-2xx" if errors else "")
        lines.append(
            f"{name:<10} {RATES[name]:>7} {cells[0]:>12} {cells[1]:>11} {cells[2]:>12} "
            f"{cells[3]:>11}  {note}"
        )
    if result.purge is not None:
        purge = result.purge
        lines.append(
            f"purge: {purge.rows:,} rows in {purge.seconds:.1f}s ({purge.rows / purge.seconds:,.0f} "
            f"rows/s), {purge.steps:,} steps, the longest held the writer {purge.longest_hold_ms:.1f}ms; "
            f"sandbox users left: {purge.users_left}"
        )
    if result.note:
        lines.append(result.note)
    return "\n".join(lines)


def targets(result: SandboxResult) -> list[Target]:
    """The criterion: no request of another user waits on the purge longer than the
    p99 without a purge. Reads never wait on it (WAL: a reader does not wait for the writer);
    a write waits at most for one step's statements (the writer runs one job at a time, and
    the commit a step shares is one the write pays anyway). So the longest a step held the
    writer is held to the creates' p99 without a purge; both loads' p99 during the purge are
    in the table. And the purge must finish."""
    create = next((row for row in result.without if row.key.startswith("sandbox_create")), None)
    schedule = create.result.schedule if create is not None and create.result else None
    goal = "longest hold of the writer <= p99 of creates without purge"
    if result.purge is None or schedule is None:
        why = result.note or "not run"
        return [
            Target("sandbox purge vs writes", goal, why, None),
            Target("sandbox purge finishes", "no expired user left", why, None),
        ]
    hold, left = result.purge.longest_hold_ms, result.purge.users_left
    return [
        Target(
            "sandbox purge vs writes",
            goal,
            f"{hold:.1f}ms vs {schedule.p99_ms:.2f}ms",
            hold <= schedule.p99_ms,
        ),
        Target(
            "sandbox purge finishes",
            "no expired user left",
            f"{left} left after {result.purge.seconds:.1f}s",
            left == 0,
        ),
    ]
