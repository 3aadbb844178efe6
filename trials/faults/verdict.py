"""What one fault's run recorded, the measures taken from it, and its targets, each passed,
failed or not applicable (None) with a sentence saying what was seen."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from .config import BLOCKS_WRITES, FLIP_LIMIT, MAX_LOG_LINES, NEEDS_RESTART
from .load import Answer, Probe

SHORTEST_JUDGED_OUTAGE = 0.3  # an outage shorter than three probes need not show on /readyz


@dataclass
class Target:
    name: str
    passed: bool | None  # None: not applicable to this fault (or this run of it)
    detail: str

    @property
    def line(self) -> str:
        verdict = {True: "ok", False: "FAILED", None: "n/a"}[self.passed]
        return f"{self.name}: {verdict}: {self.detail}"


@dataclass
class FaultResult:
    name: str
    backend: str
    error: str | None = None  # the fault could not be staged, or the harness broke
    evidence: list[str] = field(default_factory=list)  # proof the fault really happened
    notes: list[str] = field(default_factory=list)
    answers: list[Answer] = field(default_factory=list)
    readyz: list[Probe] = field(default_factory=list)
    healthz: list[Probe] = field(default_factory=list)
    origin: float = 0.0  # monotonic time the load began
    start: float | None = None  # the fault is in place
    end: float | None = None  # it is undone (or the restarted service is ready)
    operator: float | None = None  # the operator began a restart (the service stopped)
    log_lines: list[str] | None = None  # the server's lines between start and end/operator
    lost: int | None = None
    lost_detail: str = ""
    integrity: str = "n/a"
    extra: list[Target] = field(default_factory=list)  # the fault's own targets


@dataclass
class Measures:
    counts: dict[str, int]
    bad_5xx: int
    bad_bodies: dict[str, int]
    unanswered: int
    longest: float
    over_bound: int
    bite: float | None  # when writes were first refused (disk full), else the fault's start
    readyz_503: float | None  # seconds from ``bite`` to the first 503 of /readyz
    readyz_200: float | None  # seconds from ``end`` to the first 200 of /readyz after it
    ready_at_end: bool
    write_again: float | None  # seconds from ``end`` to the first create answered 200
    healthz_bad: int
    acknowledged: int


def in_restart(result: FaultResult, sent: float, answered: float) -> bool:
    """Whether a request overlapped the operator's restart (no answer is owed then)."""
    if result.operator is None:
        return False
    end = result.end if result.end is not None else float("inf")
    return answered >= result.operator and sent <= end


def measure(result: FaultResult, bound: float) -> Measures:
    answers, start, end = result.answers, result.start, result.end
    bite = start
    if result.name == "disk-full" and start is not None:
        refused = [a.sent for a in answers if a.sent >= start and a.status != 200]
        bite = min(refused) if refused else None
    # A 503 after the start counts even if it came before the first refused write (the
    # service saw the fault coming); it is timed from the bite, never below zero.
    after_start = [p for p in result.readyz if start is not None and p.sent >= start]
    after_end = [p for p in result.readyz if end is not None and p.sent >= end]
    flipped = [p.answered for p in after_start if p.status == 503]
    back = [p.answered for p in after_end if p.status == 200]
    writes = [
        a.answered for a in answers if end is not None and a.answered >= end and a.status == 200
    ]
    bad = [a for a in answers if a.status is not None and a.status >= 500 and not a.proper_503]
    return Measures(
        counts=dict(sorted(Counter(a.label for a in answers).items())),
        bad_5xx=len(bad),
        bad_bodies=dict(Counter(f"{a.status} {a.body}" for a in bad).most_common(10)),
        unanswered=sum(
            1 for a in answers if a.status is None and not in_restart(result, a.sent, a.answered)
        ),
        longest=max((a.seconds for a in answers), default=0.0),
        over_bound=sum(1 for a in answers if a.seconds > bound),
        bite=bite,
        readyz_503=max(0.0, min(flipped) - bite) if flipped and bite is not None else None,
        readyz_200=(min(back) - end) if back and end is not None else None,
        ready_at_end=bool(result.readyz) and result.readyz[-1].status == 200,
        write_again=(min(writes) - end) if writes and end is not None else None,
        healthz_bad=sum(
            1
            for p in result.healthz
            if p.status != 200 and not in_restart(result, p.sent, p.answered)
        ),
        acknowledged=sum(1 for a in answers if a.status == 200),
    )


def targets(result: FaultResult, m: Measures, bound: float) -> list[Target]:
    """Every target of this fault, in the order the table's verdict names them."""
    name, start, end = result.name, result.start, result.end
    since = "the restart was ready" if name in NEEDS_RESTART else "the fault's end"
    before = start if start is not None else float("inf")
    healthy = sum(1 for a in result.answers if a.sent < before and a.status == 200)
    found: list[Target] = [
        Target(
            "staged",
            result.error is None and bool(result.evidence) and start is not None,
            result.error or "; ".join(result.evidence) or "no evidence the fault happened",
        ),
        Target(
            "healthy before",
            healthy > 0 and any(p.status == 200 for p in result.readyz if p.sent < before),
            f"{healthy} creates answered 200 before the fault",
        ),
        Target(
            "no 5xx but 503 with Retry-After",
            m.bad_5xx == 0,
            f"{m.bad_5xx} other 5xx answers" + (f": {m.bad_bodies}" if m.bad_bodies else ""),
        ),
        Target(
            "every request answered",
            m.unanswered == 0,
            f"{m.unanswered} requests got no answer while the service was up",
        ),
        Target(
            f"every answer within {bound:g} s",
            m.over_bound == 0,
            f"longest {m.longest:.2f} s; {m.over_bound} answers took longer than {bound:g} s",
        ),
        Target(
            "nothing acknowledged lost",
            result.lost == 0,
            f"{result.lost if result.lost is not None else 'unknown'} of {m.acknowledged} "
            f"acknowledged creates lost{': ' + result.lost_detail if result.lost_detail else ''}",
        ),
    ]
    if name in BLOCKS_WRITES:
        outage = (end - start) if start is not None and end is not None else 0.0
        judged = m.bite is not None and outage >= SHORTEST_JUDGED_OUTAGE
        reference = "the first refused write" if name == "disk-full" else "the fault's start"
        found.append(
            Target(
                f"/readyz 503 within {FLIP_LIMIT:g} s",
                (m.readyz_503 is not None and m.readyz_503 <= FLIP_LIMIT) if judged else None,
                (
                    f"first 503 {m.readyz_503:.2f} s after {reference}"
                    if m.readyz_503 is not None
                    else f"no 503 from /readyz after {reference}"
                )
                + (
                    "" if judged else " (not judged: no write was refused, or the outage was short)"
                ),
            )
        )
    found += [
        Target(
            f"/readyz 200 within {FLIP_LIMIT:g} s of the end",
            m.readyz_200 is not None and m.readyz_200 <= FLIP_LIMIT and m.ready_at_end,
            (
                f"first 200 {m.readyz_200:.2f} s after {since}"
                if m.readyz_200 is not None
                else f"no 200 after {since}"
            )
            + ("" if m.ready_at_end else "; not ready when the run ended"),
        ),
        Target(
            "/healthz 200 throughout",
            m.healthz_bad == 0 and bool(result.healthz),
            f"{m.healthz_bad} of {len(result.healthz)} probes not 200 while the service was up",
        ),
        Target(
            f"writing again within {FLIP_LIMIT:g} s",
            m.write_again is not None and m.write_again <= FLIP_LIMIT,
            f"first create answered 200 {m.write_again:.2f} s after {since}"
            if m.write_again is not None
            else f"no create answered 200 after {since}",
        ),
        Target(
            f"at most {MAX_LOG_LINES} log lines during the fault",
            result.log_lines is not None and len(result.log_lines) <= MAX_LOG_LINES,
            "not counted"
            if result.log_lines is None
            else f"{len(result.log_lines)} lines"
            + (f", first: {result.log_lines[0][:200]}" if result.log_lines else ""),
        ),
    ]
    if result.backend == "sqlite":
        found.append(
            Target(
                "integrity_check ok",
                result.integrity == "ok",
                f"PRAGMA integrity_check: {result.integrity}",
            )
        )
    return found + result.extra
