"""The targets `make bench` holds plantstore to, each with what was measured and a verdict.

Targets are reported, never asserted: a miss is a finding, not a failed run. A target whose
figure was not measured, or not measured the way the target means it, says so instead of
passing or failing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from bench.lib.measure import Measurement, median_and_range, ratio_span
from bench.lib.wrk import WrkResult

BIG_TABLE = 1_000_000  # the "1M stored" of the stored-rows target
PACED_TAIL_OVER_BARE = 1.5  # the paced p99 over the bare app's, each at half its maximum
RSS_MB = 80


@dataclass
class Target:
    name: str
    goal: str
    measured: str
    met: bool | None  # None: not measured; for a range, whether its median meets the goal
    settled: bool = True  # False: a range of rounds that straddles the goal
    # A ratio's figures for the report's plot: [median, lowest, highest] and its floor.
    ratio: list[float] | None = None
    floor: float | None = None

    @property
    def verdict(self) -> str:
        if self.met is not None and not self.settled:
            return "unsettled"
        return {True: "met", False: "NOT MET", None: "not measured"}[self.met]


def floor_over_rounds(name: str, floor: float, ratios: list[float], middle: str) -> Target:
    """A ratio held to a floor over interleaved rounds: the median of the rounds' ratios
    against it, with their range (``middle`` describes the median round), unsettled when the
    range straddles the floor. ``ratios`` must not be empty."""
    span = median_and_range(ratios)
    if span is None:
        raise ValueError("a ratio over rounds needs at least one round")
    median, low, high = span
    rounds = f"over {len(ratios)} round{'s' * (len(ratios) > 1)}"
    measured = f"{ratio_span(median, low, high)} {rounds} ({middle})"
    settled = low >= floor or high < floor
    return Target(
        name, f">= {floor:g}x", measured, median >= floor, settled, [median, low, high], floor
    )


def targets(
    rows: dict[str, Measurement], top: float | None, more_plantstore: list[Measurement]
) -> list[Target]:
    """The main phase's targets; ``more_plantstore`` adds plantstore's rows of other phases
    (the peers') to the ones every row must meet (memory, no errors)."""
    ours = [row for key, row in rows.items() if not key.startswith("ref_")] + more_plantstore
    return [
        _list_share(rows.get("list10"), top),
        _at_least("durable creates, 32 conns, 1 process", rows.get("create"), 8_000),
        _group_commit_gain(rows.get("create"), rows.get("create_no_group_commit")),
        _paced_p99(by_round(rows, "list10_paced"), by_round(rows, "ref_paced")),
        _stored_ratio(rows.get("list10_paced"), rows.get("list10_paced_small")),
        _at_least("PostgreSQL --workers 2, list 10", rows.get("pg_list10"), 10_000),
        _at_least("PostgreSQL --workers 2, creates", rows.get("pg_create"), 5_000),
        _pooled_share("list 10", by_round(rows, "pgb_list10"), by_round(rows, "pg_list10")),
        _pooled_share("creates", by_round(rows, "pgb_create"), by_round(rows, "pg_create")),
        _peak_rss(ours),
        _all_2xx(ours),
    ]


Judge = Callable[[list[WrkResult]], tuple[str, bool | None]]


def check(name: str, goal: str, rows: list[Measurement | None], judge: Judge) -> Target:
    """A target judged on wrk's results, when every row it needs was run."""
    results = [row.result for row in rows if row is not None and row.result is not None]
    if len(results) < len(rows):
        why = next((row.note for row in rows if row is not None and row.result is None), "")
        return Target(name, goal, why or "not run", None)
    measured, met = judge(results)
    return Target(name, goal, measured, met)


def _list_share(row: Measurement | None, top: float | None) -> Target:
    def judge(results: list[WrkResult]) -> tuple[str, bool]:
        share = results[0].rate / top if top else 0.0
        return f"{100 * share:.0f}% ({results[0].rate:,.0f} of {top or 0:,.0f} req/s)", share >= 0.5

    return check("list 10, SQLite, 1 process", ">= 50% of reference", [row], judge)


def _at_least(name: str, row: Measurement | None, floor: int) -> Target:
    def judge(results: list[WrkResult]) -> tuple[str, bool]:
        return f"{results[0].rate:,.0f}/s", results[0].rate >= floor

    return check(name, f">= {floor:,}/s", [row], judge)


def _pooled_share(
    what: str, pooled: list[Measurement | None], direct: list[Measurement | None]
) -> Target:
    """Through PgBouncer in transaction pooling (the build that keeps prepared statements,
    where there is one) against straight to PostgreSQL, same database: a ratio a round, run
    back to back (``floor_over_rounds``)."""
    name = f"PostgreSQL {what} through PgBouncer (transaction) vs direct"
    pairs = [
        (through.result.good_rate, straight.result.good_rate)
        for through, straight in zip(pooled, direct, strict=False)
        if through is not None
        and straight is not None
        and through.result is not None
        and straight.result is not None
        and straight.result.good_rate
    ]
    if not pairs:
        why = next((row.note for row in [*pooled, *direct] if row is not None and row.note), "")
        return Target(name, ">= 0.8x", why or "not run", None)
    middle = sorted(pairs, key=lambda pair: pair[0] / pair[1])[(len(pairs) - 1) // 2]
    rates = f"median round {middle[0]:,.0f}/s vs {middle[1]:,.0f}/s direct"
    return floor_over_rounds(name, 0.8, [through / straight for through, straight in pairs], rates)


def _group_commit_gain(on: Measurement | None, off: Measurement | None) -> Target:
    def judge(results: list[WrkResult]) -> tuple[str, bool]:
        with_group, without = results[0].rate, results[1].rate
        gain = with_group / without if without else float("inf")
        return f"{gain:.2f}x ({with_group:,.0f}/s vs {without:,.0f}/s off)", gain >= 4

    return check("creates, group commit on vs off", ">= 4x", [on, off], judge)


def by_round(rows: dict[str, Measurement], key: str) -> list[Measurement | None]:
    """A paced row's rounds: round 1 under ``key``, the others under ``key_r2``, ``key_r3``…"""
    more = sorted((name for name in rows if name.startswith(f"{key}_r")), key=_round_number)
    return [rows.get(key), *(rows[name] for name in more)]


def _round_number(key: str) -> int:
    return int(key.rsplit("_r", 1)[1])


def _paced_p99(rows: list[Measurement | None], bare: list[Measurement | None]) -> Target:
    """Judged on latency from each request's due time: a send delayed by a stall counts. Each
    round's p99 of list 10 paced at half the service's maximum over the same round's p99 of
    the bare reference app paced at half of *its* maximum (``bare``): the tail granian and
    this machine allow at the same share of a ceiling. The rounds' median against the goal,
    unsettled when their range straddles it.

    Beside it, what explains it: how busy the server kept its core at that rate (CPU per
    request times the rate).
    """
    name = "list 10 p99 at half the max rate, over the bare app's at half its max"
    goal = f"<= {PACED_TAIL_OVER_BARE:g}x"
    measured = [row for row in rows if row is not None and row.result is not None]
    floors = [row for row in bare if row is not None and row.result is not None]
    if not measured or not floors:
        why = next((row.note for row in [*rows, *bare] if row is not None and row.note), "")
        return Target(name, goal, why or "not run", None)
    tails, bare_tails = _schedule_p99s(measured), _schedule_p99s(floors)
    if len(tails) < len(measured) or len(bare_tails) < len(floors):
        sent = ", ".join(f"{row.result.p99_ms:.2f}" for row in measured if row.result)
        why = f"not measured from the schedule in every round (p99 from the send {sent} ms)"
        return Target(name, goal, why, None)
    ratios = [tail / floor for tail, floor in zip(tails, bare_tails, strict=False) if floor]
    span, ours, theirs = (median_and_range(v) for v in (ratios, tails, bare_tails))
    if span is None or ours is None or theirs is None:
        return Target(name, goal, "no round measured the bare app's p99", None)
    median, low, high = span
    first, floor_row = measured[0], floors[0]
    assert first.result is not None
    assert floor_row.result is not None
    rounds = f"over {len(ratios)} round{'s' * (len(ratios) > 1)}"
    text = (
        f"{median:.2f}x [{low:.2f}-{high:.2f}] {rounds}: p99 {_ms(ours)} from the schedule at "
        f"{first.result.rate:,.0f}/s achieved ({first.note}), the bare app's {_ms(theirs)} at "
        f"{floor_row.result.rate:,.0f}/s ({floor_row.note}){_paced_context(measured)}"
    )
    ceiling = PACED_TAIL_OVER_BARE
    settled = high <= ceiling or low > ceiling
    return Target(name, goal, text, median <= ceiling, settled)


def _ms(span: tuple[float, float, float]) -> str:
    median, low, high = span
    return f"{median:.2f} ms [{low:.2f}-{high:.2f}]"


def _schedule_p99s(rows: Sequence[Measurement | None]) -> list[float]:
    """The p99s from the schedule of the rounds that measured one with every answer matched."""
    return [
        row.result.schedule.p99_ms
        for row in rows
        if row is not None
        and row.result is not None
        and row.result.schedule is not None
        and not row.result.schedule.unmatched
    ]


def _paced_context(rows: list[Measurement]) -> str:
    """What explains the paced tail, as far as it was measured: "; server 73 % of a core busy
    (104 µs a request, the rounds' median)"."""
    busy = [
        (row.cpu_us_per_request * row.result.rate / 1e6, row.cpu_us_per_request)
        for row in rows
        if row.result is not None and row.cpu_us_per_request
    ]
    if not busy:
        return ""
    share, cpu = sorted(busy)[(len(busy) - 1) // 2]
    return f"; server {100 * share:.0f} % of a core busy ({cpu:.0f} µs a request)"


def _stored_ratio(big: Measurement | None, small: Measurement | None) -> Target:
    """Reported only when the big file really held a million rows (a quick run seeds far
    fewer); p50 from the schedule when the paced runs measured it, else from the send."""
    name, goal = "list 10, 1M stored vs 1k stored", "p50 <= 1.2x"
    stored = big.stored_plants if big is not None else None
    if big is not None and big.result is not None and (stored or 0) < BIG_TABLE:
        seeded = "an unknown number of" if stored is None else f"{stored:,}"
        return Target(name, goal, f"not measured ({seeded} rows seeded, not 1,000,000)", None)

    def judge(results: list[WrkResult]) -> tuple[str, bool]:
        large, few = (_p50_p99(result) for result in results)
        ratio = large[0] / few[0]
        measured = (
            f"p50 {ratio:.2f}x ({large[0]:.2f} vs {few[0]:.2f} ms; p99 {large[1]:.2f} vs "
            f"{few[1]:.2f} ms{large[2]}) at {results[0].rate:,.0f} and {results[1].rate:,.0f}/s "
            f"with {stored or 0:,} and {small.stored_plants if small else 0:,} plants stored"
        )
        return measured, ratio <= 1.2

    return check(name, goal, [big, small], judge)


def _p50_p99(result: WrkResult) -> tuple[float, float, str]:
    schedule = result.schedule
    if schedule is None or schedule.unmatched:
        return result.p50_ms, result.p99_ms, ", from the send"
    return schedule.p50_ms, schedule.p99_ms, ", from the schedule"


def _peak_rss(rows: list[Measurement]) -> Target:
    name, goal = "peak RSS per process", f"<= {RSS_MB} MB"
    peaks = [row.peak_rss_mb for row in rows if row.peak_rss_mb is not None]
    if not peaks:
        return Target(name, goal, "not run", None)
    return Target(name, goal, f"{max(peaks):.0f} MB", max(peaks) <= RSS_MB)


def _all_2xx(rows: list[Measurement]) -> Target:
    bad = [r.scenario for r in rows if r.result and (r.result.errors or r.result.socket_errors)]
    measured = "all 2xx" if not bad else "errors in: " + ", ".join(bad)
    return Target("every response 2xx, no socket errors", "0 errors", measured, not bad)


def targets_text(found: list[Target]) -> str:
    """One aligned line per target: verdict, name, goal, measured value."""
    width = max(len(t.name) for t in found)
    goal_width = max(20, *(len(t.goal) for t in found))
    return "\n".join(
        f"  [{t.verdict:^12}] {t.name:<{width}}  {t.goal:<{goal_width}} {t.measured}" for t in found
    )
