"""What a torture run is given (``TortureConfig``) and what it finds (``TortureResult``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

Value = tuple[str, str | None]  # a plant as listed: name and tag (None: no tag)
State = Value | None  # None: absent


class TortureError(RuntimeError):
    """The run could not be carried out (not a finding about the data)."""


@dataclass(frozen=True)
class TortureConfig:
    database_url: str
    workdir: Path  # server logs go here
    kills: int = 100
    clients: int = 12
    users: int = 4
    tokens_per_user: int = 2
    workers: int = 1  # server processes (passed as --workers: the default is one per core)
    # With workers > 1, the chance that a kill takes one worker rather than the whole group.
    worker_kill_chance: float = 0.0
    # With workers > 1, the chance that a kill takes the supervisor alone: its workers, told by
    # the kernel, stop as on SIGTERM, and the server is restarted once they are gone.
    supervisor_kill_chance: float = 0.0
    min_traffic: float = 0.05  # seconds of traffic between a restart and the next kill
    max_traffic: float = 0.4
    startup_kill_chance: float = 0.1  # also kill a restart before it answers, now and then
    seed: int | None = None
    server_env: Mapping[str, str] = field(default_factory=dict)
    progress: Callable[[str], None] | None = None


@dataclass
class TortureResult:
    backend: str
    seed: int
    workers: int = 1
    kills: int = 0  # SIGKILLs under traffic (of the whole group, or of one worker)
    worker_kills: int = 0  # of those, SIGKILLs of one worker, which granian replaced
    owner_kills: int = 0  # of those, of the worker that owned the SQLite writer
    supervisor_kills: int = 0  # of those, SIGKILLs of the supervisor alone
    startup_kills: int = 0  # extra SIGKILLs of a server still starting
    acknowledged_creates: int = 0
    acknowledged_deletes: int = 0
    uncertain: int = 0  # attempts cut off by a kill, or answered 503 with Retry-After
    unavailable: int = 0  # of those, the 503s with Retry-After
    not_sent: int = 0  # attempts whose connection was refused
    keys: int = 0  # (user, id) pairs a create was attempted for
    listed: int = 0  # plants listed at the end
    lost: list[str] = field(default_factory=list)
    resurrected: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    odd: list[str] = field(default_factory=list)
    faults: list[str] = field(default_factory=list)  # 5xx answers but a 503 with Retry-After
    integrity_check: str = "n/a"
    seconds: float = 0.0
    restart_seconds: float = 0.0  # all restarts after a group kill, from the kill to /healthz
    respawn_seconds: float = 0.0  # all worker kills, from the kill to the replacement serving

    @property
    def mean_restart(self) -> float:
        restarts = self.kills - self.worker_kills  # the group's kills and the supervisor's
        return self.restart_seconds / restarts if restarts else 0.0

    @property
    def mean_respawn(self) -> float:
        return self.respawn_seconds / self.worker_kills if self.worker_kills else 0.0

    @property
    def passed(self) -> bool:
        return (
            not (self.lost or self.resurrected or self.unexpected or self.odd or self.faults)
            and self.integrity_check in ("ok", "n/a")
            and self.acknowledged_creates > 0
        )

    def findings(self, limit: int = 10) -> str:
        """The first few of each kind of violation, one per line."""
        lines: list[str] = []
        for kind, items in (
            ("lost", self.lost),
            ("resurrected", self.resurrected),
            ("unexpected", self.unexpected),
            ("odd answer", self.odd),
            ("server fault", self.faults),
        ):
            lines += [f"{kind}: {item}" for item in items[:limit]]
            if len(items) > limit:
                lines.append(f"{kind}: ... and {len(items) - limit} more")
        if self.integrity_check not in ("ok", "n/a"):
            lines.append(f"integrity_check: {self.integrity_check}")
        return "\n".join(lines)
