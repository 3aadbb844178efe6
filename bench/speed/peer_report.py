"""The peers table: plantstore's rates beside each peer's, as ratios and against the ceiling.

Ratios use each server's 2xx answers per second, so a peer that answers fast with errors earns
nothing for them; the table still shows every server's non-2xx count. The servers ran in
interleaved rounds: a row shows its median round, a ratio its median over the rounds and its
range, and a target's verdict is met (the whole range at or above the goal), missed (the whole
range below) or unsettled (the range straddles it).
"""

from __future__ import annotations

from typing import Any

from bench.lib.measure import median_and_range, ratio_span

from .peer_envs import FASTAPI_ASYNCPG, FASTAPI_SQLITE, STARLETTE_NAIVE, Peer
from .peer_phase import (
    PLANTSTORE,
    POSTGRES,
    SQLITE,
    Contender,
    round_ratios,
)
from .targets import Target, floor_over_rounds

PEERS = (FASTAPI_SQLITE, STARLETTE_NAIVE, FASTAPI_ASYNCPG)

# (backend, peer, scenario, how many times the peer's rate plantstore is to manage)
GOALS: tuple[tuple[str, Peer, str, float], ...] = (
    (SQLITE, STARLETTE_NAIVE, "list10", 1.0),
    (SQLITE, FASTAPI_SQLITE, "list10", 3.5),
    (SQLITE, FASTAPI_SQLITE, "create", 4.0),
    (SQLITE, STARLETTE_NAIVE, "create", 2.0),
    (POSTGRES, FASTAPI_ASYNCPG, "list10", 3.0),
    (POSTGRES, FASTAPI_ASYNCPG, "create", 3.0),
)
WHAT = {"list10": "list 10", "create": "durable creates"}
COLUMNS = (
    ("server", 50),
    ("list 10/s", 10),
    ("% ref", 6),
    ("p99 ms", 8),
    ("creates/s", 10),
    ("p99 ms", 8),
    ("CPU µs list/create", 19),
    ("RSS MB", 7),
    ("non-2xx", 8),
    ("other%", 7),
    ("plantstore is (median [range])", 40),
)


def _plantstore(contenders: list[Contender], backend: str) -> Contender | None:
    return next((c for c in contenders if c.backend == backend and c.name == PLANTSTORE), None)


def table(contenders: list[Contender], top: float | None, pin: str) -> str:
    """One line per server, grouped by backend; notes (not run, PostgreSQL's CPU) below."""
    ceiling = f"% ref: of the reference ceiling, {top:,.0f} req/s" if top else "no ceiling"
    lines = [
        f"peers: each server on a fresh database holding the bench user's 20 plants; {pin} "
        f"(PostgreSQL itself unpinned); {ceiling}; 'plantstore is' (list / create) compares "
        "2xx answers per second; other% as above (PostgreSQL's rows: mostly PostgreSQL)",
        _line([title for title, _ in COLUMNS]),
    ]
    notes: list[str] = []
    for backend in (SQLITE, POSTGRES):
        ours = _plantstore(contenders, backend)
        lines.append(backend)
        for contender in (c for c in contenders if c.backend == backend):
            lines.append(_line(_cells(contender, ours, top)))
            notes += _notes(contender)
    lines.append("versions (pinned in bench/peers/<name>.requirements.txt):")
    lines += [f"  {peer.label}: {_versions(peer)}" for peer in _peers_run(contenders)]
    return "\n".join([*lines, *(["notes:", *notes] if notes else [])])


def _peers_run(contenders: list[Contender]) -> list[Peer]:
    names = {contender.name for contender in contenders}
    return [peer for peer in PEERS if peer.name in names]


def _versions(peer: Peer) -> str:
    return ", ".join(f"{name} {version}" for name, version in peer.versions().items())


def _line(cells: list[str]) -> str:
    return "".join(
        f"{cell:>{width}}" if i else f"{cell:<{width}}"
        for i, (cell, (_, width)) in enumerate(zip(cells, COLUMNS, strict=True))
    )


def _cells(contender: Contender, ours: Contender | None, top: float | None) -> list[str]:
    listed, created = contender.rows.get("list10"), contender.rows.get("create")
    cells = [f"  {contender.label}"]
    for row in (listed, created):
        result = row.result if row is not None else None
        if result is None:
            cells += ["not run", "-", "-"] if row is listed else ["not run", "-"]
            continue
        share = [f"{100 * result.rate / top:.0f}%" if top else "-"] if row is listed else []
        cells += [f"{result.rate:,.0f}", *share, f"{result.p99_ms:.2f}"]
    cpu = [
        f"{r.cpu_us_per_request:,.0f}" if r and r.cpu_us_per_request else "-"
        for r in (listed, created)
    ]
    rss = [r.peak_rss_mb for r in (listed, created) if r is not None and r.peak_rss_mb]
    errors = sum(
        r.result.errors + r.result.socket_errors
        for r in (listed, created)
        if r is not None and r.result is not None
    )
    others = [r.other_cpu_share for r in (listed, created) if r and r.other_cpu_share is not None]
    other = f"{100 * max(others):.0f}%" if others else "-"
    cells += ["/".join(cpu), f"{max(rss):.0f}" if rss else "-", str(errors), other]
    if contender.name == PLANTSTORE or ours is None:
        return [*cells, "-"]
    spans = [median_and_range(round_ratios(ours, contender, key)) for key in ("list10", "create")]
    return [*cells, " / ".join("-" if r is None else ratio_span(*r) for r in spans)]


def _notes(contender: Contender) -> list[str]:
    rows = [row for row in contender.rows.values() if row.result is None]
    if rows:
        return [f"  {contender.backend} {contender.label}: {rows[0].note}"]
    database = [
        f"{row.postgres_cpu_us_per_request:,.0f}"
        for row in contender.rows.values()
        if row.postgres_cpu_us_per_request
    ]
    if contender.backend != POSTGRES or not database:
        return []
    spent = " / ".join(database)
    return [f"  {contender.backend} {contender.label}: +{spent} µs of PostgreSQL CPU per request"]


def targets(contenders: list[Contender]) -> list[Target]:
    """plantstore's ratio to each peer against their floors."""
    found = []
    for backend, peer, key, floor in GOALS:
        name = f"{backend} {WHAT[key]}: plantstore / {peer.short}"
        ours = _plantstore(contenders, backend)
        theirs = next((c for c in contenders if c.backend == backend and c.name == peer.name), None)
        mine = ours.rows.get(key) if ours else None
        yours = theirs.rows.get(key) if theirs else None
        ratios = [] if ours is None or theirs is None else round_ratios(ours, theirs, key)
        if not ratios or mine is None or yours is None or not mine.result or not yours.result:
            missing = [r.note for r in (mine, yours) if r is not None and r.result is None]
            found.append(Target(name, f">= {floor:g}x", (missing or ["not run"])[0], None))
            continue
        rates = f"median rounds {mine.result.good_rate:,.0f} vs {yours.result.good_rate:,.0f}/s"
        found.append(floor_over_rounds(name, floor, ratios, rates))
    return found


def as_json(contenders: list[Contender], top: float | None) -> dict[str, Any]:
    """The peers' section of the run's JSON: every row, and plantstore's ratio to each peer."""
    ratios = []
    for contender in contenders:
        ours = _plantstore(contenders, contender.backend)
        if contender.name == PLANTSTORE or ours is None:
            continue
        for key in ("list10", "create"):
            rounds = round_ratios(ours, contender, key)
            span = median_and_range(rounds)
            ratios.append(
                {
                    "backend": contender.backend,
                    "peer": contender.name,
                    "scenario": key,
                    "ratio": None if span is None else span[0],
                    "range": None if span is None else [span[1], span[2]],
                    "rounds": rounds,
                }
            )
    return {
        "ceiling_rate": top,
        "seeded_plants": 20,
        "contenders": [contender.as_json() for contender in contenders],
        "plantstore_ratios": ratios,
        "versions": {peer.name: peer.versions() for peer in _peers_run(contenders)},
    }
