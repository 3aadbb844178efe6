"""What one process knows of its database's ability to take writes, from the writes it made.

Every write's outcome passes through ``WriteHealth``: a 503 (``StoreUnavailable``) starts or
continues a fault, anything else ends it. A fault is told once when it starts and once when
it is over (writes taken for ``SETTLE_S`` with no refusal between: a server that ends the
connections ten times in three seconds is one fault), with how many requests it refused,
never once per request; ``on_refusal`` counts them by kind for the metrics.

``/readyz`` asks ``verdict``: a write unanswered for ``STALL_S`` means the database is not
answering (a frozen disk, a stuck server); a refusal in the last ``FAULT_FRESH_S`` is still
the truth; so is a write answered in the last ``OK_FRESH_S``. With none of these, the
caller makes one tiny write (a probe) and passes its outcome here like any other: on an idle
service at most one probe a second, under load none at all.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from ..errors import StoreUnavailable
from .failures import describe_failure

log = logging.getLogger("plantstore.db")

STALL_S = 0.5  # a write unanswered this long: the database is not answering
FAULT_FRESH_S = 0.5  # a refusal this recent speaks for the database without a probe
OK_FRESH_S = 1.0  # and so does a write answered this recently
PROBE_WAIT_S = 0.5  # how long /readyz waits for its probe
SETTLE_S = 2.0  # writes taken this long with no refusal: the fault is told over


def not_answering() -> StoreUnavailable:
    return StoreUnavailable("the database is not answering; retry shortly", "not_answering")


class WriteHealth:
    """The outcomes of one process's writes (its event loop's thread only)."""

    def __init__(self, on_refusal: Callable[[str], None] | None = None) -> None:
        self._on_refusal = on_refusal
        self._in_flight = 0
        self._busy_since = 0.0  # when the writes in flight began to be (none answered since)
        self._answered_at = -OK_FRESH_S  # monotonic time of the last outcome
        self._fault: StoreUnavailable | None = None  # the refusal the last outcome was
        self._log = _FaultLog()

    def started(self) -> None:
        if not self._in_flight:
            self._busy_since = time.monotonic()
        self._in_flight += 1

    def finished(self, error: BaseException | None) -> None:
        self._in_flight -= 1
        if isinstance(error, StoreUnavailable):
            self.refused(error)
        else:
            self.served()

    def served(self) -> None:
        """A write was made (or refused for a reason of its own: a conflict, a quota)."""
        now = self._answered_at = time.monotonic()
        self._busy_since = now
        if self._fault is not None:
            self._fault = None
            self._log.served(now)

    def refused(self, error: StoreUnavailable) -> None:
        """A request was answered 503 for ``error``."""
        now = self._answered_at = time.monotonic()
        self._busy_since = now
        if self._on_refusal is not None:
            self._on_refusal(error.kind)
        self._fault = error
        self._log.refused(error, now)

    @property
    def fault_kind(self) -> str | None:
        """The kind of the fault the last outcome was; None if it was no fault."""
        return None if self._fault is None else self._fault.kind

    def verdict(self) -> StoreUnavailable | bool | None:
        """The fault that refuses writes now, None if writes are taken, or True if only a
        probe can tell."""
        now = time.monotonic()
        if self._in_flight and now - self._busy_since > STALL_S:
            return not_answering()
        age = now - self._answered_at
        if self._fault is not None:
            return self._fault if age < FAULT_FRESH_S else True
        return None if age < OK_FRESH_S else True


class _FaultLog:
    """The two lines of one fault: when it started, and when it was over."""

    def __init__(self) -> None:
        self._started: float | None = None
        self._served_at = 0.0  # when writes were first taken again
        self._kinds: list[str] = []
        self._refused = 0
        self._settling: asyncio.TimerHandle | None = None

    def refused(self, error: StoreUnavailable, now: float) -> None:
        if self._settling is not None:  # not over after all: the same fault goes on
            self._settling.cancel()
            self._settling = None
        if self._started is None:
            self._started = now
            log.warning("the database cannot take writes (%s): %s", error.kind, error.message)
        if error.kind not in self._kinds:
            self._kinds.append(error.kind)
        self._refused += 1

    def served(self, now: float) -> None:
        if self._started is None or self._settling is not None:
            return
        self._served_at = now
        try:
            self._settling = asyncio.get_running_loop().call_later(SETTLE_S, self._over)
        except RuntimeError:  # no event loop (a command finishing): say it now
            self._over()

    def _over(self) -> None:
        if self._started is not None:
            log.warning(
                "the database takes writes again after %.1f s (%s); %d requests were refused",
                self._served_at - self._started,
                ", ".join(self._kinds),
                self._refused,
            )
        self._started, self._settling, self._kinds, self._refused = None, None, [], 0


class Readiness:
    """``/readyz``'s question, answered from ``health`` or, when only a write can tell, by
    ``probe`` (one tiny write whose outcome reaches ``health``), shared by concurrent asks."""

    def __init__(self, health: WriteHealth, probe: Callable[[], Awaitable[None]]) -> None:
        self._health = health
        self._probe = probe
        self._probing: asyncio.Future[None] | None = None

    async def check(self) -> None:
        """Return if a write would be taken now; raise the 503 that says why not."""
        verdict = self._health.verdict()
        if verdict is None:
            return
        if isinstance(verdict, StoreUnavailable):
            raise verdict
        probing = self._probing
        if probing is None or probing.done():
            probing = self._probing = asyncio.ensure_future(self._probe())
            probing.add_done_callback(_seen)
        try:
            async with asyncio.timeout(PROBE_WAIT_S):
                await asyncio.shield(probing)
        except TimeoutError:
            raise not_answering() from None
        except StoreUnavailable:
            raise
        except Exception as exc:  # a database that answers but cannot serve (its schema gone)
            unusable = StoreUnavailable("the database cannot take writes; retry later", "unusable")
            if self._health.fault_kind != unusable.kind:  # once, as the fault starts
                log.warning("the readiness probe failed: %s", describe_failure(exc))
            self._health.refused(unusable)
            raise unusable from None


def _seen(probe: asyncio.Future[None]) -> None:
    if not probe.cancelled():
        probe.exception()  # told to whoever waited; nobody else is owed it
