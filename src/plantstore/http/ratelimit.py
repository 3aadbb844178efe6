"""Rate limits: requests per token, and failed authentications per client address.

Each budget is "N per period" (``100/second``, the ``limits`` notation), spent in bursts of at
most N, by a generic cell rate algorithm (GCRA). Under ``plantstore serve`` with several
workers, every worker of the machine spends one budget, kept in shared memory
(``machine_budget.py``); in a single process ``Budget`` keeps it in memory: one float per key
and no lock, clock read or timer beyond one ``monotonic()``, where the ``limits`` library's
memory storage cost a noticeable share of a list request. With ``PLANTSTORE_REDIS_URL`` set,
every instance spends the same budget through the ``limits`` library's Redis storage instead,
as a moving window (never more than N in any period: a fixed window admitted up to 2N across
its edge). An address that has failed authentication too often is refused (429) before
its token is even looked up, so tokens cannot be guessed quickly; requests with a good token
never count against it. If Redis cannot be reached the limits are not enforced (logged): they
protect the service, and must not take it down.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable

from limits import RateLimitItem
from limits.aio.strategies import MovingWindowRateLimiter
from limits.storage import storage_from_string
from starlette.types import Scope

from ..errors import TooManyRequests
from ..settings import parse_rate
from .machine_budget import MachineBudget, MachineTable, hex_key, text_key

log = logging.getLogger(__name__)
_WARN_EVERY_SECONDS = 5.0
_MAX_KEYS = 100_000  # keys kept before spent-out ones are dropped


def client_address(scope: Scope, trusted_proxies: frozenset[str]) -> str:
    """The caller's address; behind a trusted proxy, the last hop its X-Forwarded-For names."""
    peer = scope.get("client")
    address: str = peer[0] if peer else "unknown"
    if address in trusted_proxies:
        for name, value in scope["headers"]:
            if name == b"x-forwarded-for":
                address = value.decode("latin-1").rsplit(",", 1)[-1].strip() or address
    return address


class Budget:
    """``amount`` spends per ``period`` seconds for each key, in this process (GCRA).

    Each key keeps its theoretical arrival time: when its budget would be whole again if
    spending stopped now. A spend moves it one interval on, and is refused while it lies more
    than a period, less one interval, ahead of now.
    """

    def __init__(self, item: RateLimitItem) -> None:
        period = float(item.get_expiry())
        self._interval = period / item.amount
        self._tolerance = period - self._interval
        self._arrivals: dict[str, float] = {}
        self._prune_at = _MAX_KEYS

    async def wait(self, key: str) -> float:
        """Seconds until ``key`` may spend again; 0 when it may now."""
        now = time.monotonic()
        return max(0.0, self._arrivals.get(key, now) - self._tolerance - now)

    async def spend(self, key: str) -> float:
        """Spend once if the budget allows: 0; otherwise the seconds to wait, nothing spent."""
        now = time.monotonic()
        arrival = self._arrivals.get(key, now)
        if arrival < now:
            arrival = now
        wait = arrival - self._tolerance - now
        if wait > 0:
            return wait
        self._arrivals[key] = arrival + self._interval
        if len(self._arrivals) > self._prune_at:
            self._forget_whole(now)
        return 0.0

    def _forget_whole(self, now: float) -> None:
        """Drop keys whose budget is whole again: they behave as if never seen. The next prune
        waits until the dict has doubled, so pruning stays amortised while many are live."""
        self._arrivals = {key: at for key, at in self._arrivals.items() if at > now}
        self._prune_at = max(_MAX_KEYS, 2 * len(self._arrivals))


class SharedBudget:
    """The same budget kept in Redis through the ``limits`` library (a moving window), so
    every worker of every instance spends it; if Redis fails, it allows, and says so."""

    def __init__(
        self,
        limiter: MovingWindowRateLimiter,
        item: RateLimitItem,
        kind: str,
        failures: _FailureLog,
    ) -> None:
        self._limiter = limiter
        self._item = item
        self._kind = kind
        self._failures = failures

    async def wait(self, key: str) -> float:
        return await self._use(key, spend=False)

    async def spend(self, key: str) -> float:
        return await self._use(key, spend=True)

    async def _use(self, key: str, *, spend: bool) -> float:
        use = self._limiter.hit if spend else self._limiter.test
        try:
            if await use(self._item, self._kind, key):
                return 0.0
        except Exception as exc:  # any storage failure: fail open, and say so
            self._failures.note(exc)
            return 0.0
        try:
            stats = await self._limiter.get_window_stats(self._item, self._kind, key)
        except Exception:  # the window cannot be read: a second is a fair guess
            return 1.0
        return max(1.0, stats.reset_time - time.time())


class RateLimits:
    """The two budgets a request may spend; a check raises a 429 when one is used up."""

    def __init__(
        self,
        per_token: str,
        auth_failures: str,
        redis_url: str | None,
        machine: MachineTable | None = None,
    ) -> None:
        shared = None
        if redis_url:
            uri = f"async+{redis_url.removeprefix('async+')}"
            shared = MovingWindowRateLimiter(storage_from_string(uri))
        failures = _FailureLog()
        self._per_token = _budget(
            parse_rate(per_token), shared, "token", failures, machine, hex_key
        )
        self._failures = _budget(
            parse_rate(auth_failures), shared, "auth-failure", failures, machine, text_key
        )

    async def spend_token_request(self, token_hash: str) -> None:
        if self._per_token is not None and (wait := await self._per_token.spend(token_hash)):
            raise TooManyRequests("too many requests with this token; slow down", _seconds(wait))

    async def check_address(self, address: str) -> None:
        """Refuse an address that has used up its failed authentications."""
        if self._failures is not None and (wait := await self._failures.wait(address)):
            raise TooManyRequests(
                "too many failed authentications from this address", _seconds(wait)
            )

    async def note_auth_failure(self, address: str) -> None:
        if self._failures is not None:
            await self._failures.spend(address)


def retry_after(wait: float) -> int:
    """A Retry-After value: whole seconds, at least one."""
    return _seconds(wait)


def _budget(
    item: RateLimitItem | None,
    shared: MovingWindowRateLimiter | None,
    kind: str,
    failures: _FailureLog,
    machine: MachineTable | None,
    key_of: Callable[[str], int],
) -> Budget | SharedBudget | MachineBudget | None:
    """No budget for "off"; in Redis when it is configured; shared by the machine's workers
    under a ``serve`` of several; in this process otherwise."""
    if item is None:
        return None
    if shared is not None:
        return SharedBudget(shared, item, kind, failures)
    if machine is not None:
        return MachineBudget(machine, kind, item, key_of)
    return Budget(item)


class _FailureLog:
    """Logs a failing Redis at most once every few seconds."""

    def __init__(self) -> None:
        self._last = -math.inf

    def note(self, exc: Exception) -> None:
        now = time.monotonic()
        if now - self._last >= _WARN_EVERY_SECONDS:
            self._last = now
            log.warning("rate limits not enforced: their store failed (%s)", type(exc).__name__)


def _seconds(wait: float) -> int:
    """A Retry-After value: whole seconds, at least one."""
    return max(1, math.ceil(wait))
