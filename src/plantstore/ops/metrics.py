"""Prometheus metrics: what each worker counts, written at most every 50 ms.

``plantstore serve`` points ``PROMETHEUS_MULTIPROC_DIR`` at a fresh directory before the
workers start; each worker writes its samples there, and the metrics listener in the main
process (``metrics_server.py``) adds them up. Only workers import this module, after the
variable is set. Where no server set it (the app in a test client), samples stay in memory.

In multiprocess mode every ``inc`` or ``observe`` takes a lock and writes an mmap'd file:
seven writes per request, a tenth of a list request's time. So requests note their samples
in plain dicts (``Tally``), and the tally writes them, added up, ``FLUSH_SECONDS`` after the
first of them: one write per series for all the requests of that time. Written once per pass
of the event loop instead, they were still a write per series per request wherever the server
is not saturated (a pass then answers one request or two). A scrape sees a request at most
that late, as the access log is (``logs.JSONLines``); the app's shutdown writes what is left.
"""

from __future__ import annotations

import asyncio
import bisect
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from prometheus_client import Counter, Gauge, Histogram

T = TypeVar("T")
FLUSH_SECONDS = 0.05  # how late a sample may reach the shared files (and so a scrape)
UNMATCHED_ROUTE = "unmatched"  # one label for every unknown path, so scanners add no series
# Any other method name a client makes up is counted as "other", for the same reason.
KNOWN_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})

REQUESTS = Counter(
    "plantstore_http_requests",
    "HTTP requests answered, by method, route template and status.",
    ["method", "route", "status"],
)
REQUEST_SECONDS = Histogram(
    "plantstore_http_request_duration_seconds",
    "Time from the request's arrival to the end of its answer.",
    ["method", "route"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
)
IN_FLIGHT = Gauge(
    "plantstore_http_requests_in_flight",
    "Requests being answered now.",
    multiprocess_mode="livesum",
)
STORE_SECONDS = Histogram(
    "plantstore_store_operation_duration_seconds",
    "Time spent in the store, by operation (a durable write includes its commit).",
    ["operation"],
    buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1.0),
)
COMMIT_BATCH = Histogram(
    "plantstore_group_commit_batch_size",
    "Writes carried by one SQLite commit (one fsync).",
    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024),
)
LOCK_WAIT = Histogram(
    "plantstore_sqlite_write_lock_wait_seconds",
    "Time a SQLite group commit waited for another process's write lock (waits only).",
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
)
LOCK_TIMEOUTS = Counter(
    "plantstore_sqlite_write_lock_timeouts",
    "Group commits refused (503) because another process held the write lock too long.",
)
DATABASE_REFUSALS = Counter(
    "plantstore_database_refusals",
    "Requests answered 503 because the database could not take them, by kind of trouble "
    "(disk_full, io_error, read_only, not_answering, file_replaced, unreachable, ...).",
    ["kind"],
)


class Tally:
    """Samples of the last ``FLUSH_SECONDS``, written to prometheus-client together.

    Not thread-safe: only the event loop's thread notes samples here.
    """

    def __init__(self) -> None:
        self._counts: dict[Any, int] = {}  # counter child -> increments
        self._observations: dict[Any, list[float]] = {}  # histogram child -> values
        self.in_flight = 0
        self._written_in_flight = 0
        self._scheduled = False

    def count(self, counter: Any) -> None:
        self._counts[counter] = self._counts.get(counter, 0) + 1
        self._schedule()

    def observe(self, histogram: Any, value: float) -> None:
        values = self._observations.get(histogram)
        if values is None:
            self._observations[histogram] = [value]
        else:
            values.append(value)
        self._schedule()

    def started(self) -> None:
        self.in_flight += 1
        self._schedule()

    def finished(self) -> None:
        self.in_flight -= 1
        self._schedule()

    def _schedule(self) -> None:
        if self._scheduled:
            return
        self._scheduled = True
        try:
            asyncio.get_running_loop().call_later(FLUSH_SECONDS, self.write)
        except RuntimeError:  # no loop running: write at once
            self.write()

    def write(self) -> None:
        """Add the samples held to the metrics, one write per series."""
        self._scheduled = False
        counts, self._counts = self._counts, {}
        observations, self._observations = self._observations, {}
        for counter, increments in counts.items():
            counter.inc(increments)
        for histogram, values in observations.items():
            _observe_all(histogram, values)
        if self.in_flight != self._written_in_flight:
            IN_FLIGHT.set(self.in_flight)
            self._written_in_flight = self.in_flight


def _observe_all(histogram: Any, values: list[float]) -> None:
    """``histogram.observe`` for each value, with one write per bucket touched.

    prometheus-client has no call for many observations at once; its ``observe`` adds the
    value to ``_sum`` and 1 to the first bucket whose bound holds it (buckets are stored
    non-cumulative), which is what this does in bulk. The test of the latency histograms
    (tests/ops/test_observability.py) pins the result.
    """
    bounds: list[float] = histogram._upper_bounds
    per_bucket: dict[int, int] = {}
    for value in values:
        index = bisect.bisect_left(bounds, value)
        per_bucket[index] = per_bucket.get(index, 0) + 1
    histogram._sum.inc(sum(values))
    for index, count in per_bucket.items():
        histogram._buckets[index].inc(count)


TALLY = Tally()  # one per process: its event loop's


class RequestMetrics:
    """Counts one answered request; each label set's children are looked up once."""

    def __init__(self, tally: Tally = TALLY) -> None:
        self._tally = tally
        self._counters: dict[tuple[str, str, int], Any] = {}
        self._timers: dict[tuple[str, str], Any] = {}

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        if method not in KNOWN_METHODS:
            method = "other"
        counter = self._counters.get((method, route, status))
        if counter is None:
            counter = REQUESTS.labels(method, route, str(status))
            self._counters[method, route, status] = counter
        self._tally.count(counter)
        timer = self._timers.get((method, route))
        if timer is None:
            timer = self._timers[method, route] = REQUEST_SECONDS.labels(method, route)
        self._tally.observe(timer, seconds)


def timed(operation: str, call: Callable[..., Awaitable[T]]) -> Callable[..., Awaitable[T]]:
    """``call`` with each of its durations observed as store operation ``operation``."""
    histogram = STORE_SECONDS.labels(operation)
    observe = TALLY.observe

    async def timed_call(*args: Any, **kwargs: Any) -> T:
        started = time.perf_counter()
        try:
            return await call(*args, **kwargs)
        finally:
            observe(histogram, time.perf_counter() - started)

    return timed_call


def time_operations(store: object, operations: tuple[str, ...]) -> None:
    """Observe the duration of each named call of ``store`` (the store itself stays unaware).

    The app names the request path's calls; the rest run from the command line.
    """
    for operation in operations:
        setattr(store, operation, timed(operation, getattr(store, operation)))


def observe_commit(writes: int) -> None:
    """Called by the SQLite writer's thread, so written at once rather than tallied."""
    COMMIT_BATCH.observe(writes)


def observe_refusal(kind: str) -> None:
    """A request refused by a fault of the environment (the event loop's thread)."""
    TALLY.count(DATABASE_REFUSALS.labels(kind))


def observe_lock_wait(seconds: float, timed_out: bool) -> None:
    """Called by the SQLite writer's thread when another process held the write lock."""
    LOCK_WAIT.observe(seconds)
    if timed_out:
        LOCK_TIMEOUTS.inc()


# Webhooks: tallied like requests (``observe_attempt``), since a backlog is sent at thousands
# of attempts a second on the API's own event loop.
WEBHOOK_DELIVERIES = Counter(
    "plantstore_webhook_attempts",
    "Webhook delivery attempts, by outcome: delivered, retry, failed (retries spent), gone (410).",
    ["outcome"],
)
WEBHOOK_ATTEMPT_SECONDS = Histogram(
    "plantstore_webhook_attempt_duration_seconds",
    "Time one webhook attempt took, from connecting to the receiver's answer.",
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0),
)
WEBHOOK_OLDEST_UNDELIVERED = Gauge(
    "plantstore_webhook_oldest_undelivered_seconds",
    "Age of the oldest event not yet delivered to an enabled subscription (0: none).",
    multiprocess_mode="max",
)


_ATTEMPT_COUNTERS: dict[str, Any] = {}


def observe_attempt(outcome: str, seconds: float) -> None:
    """One webhook attempt's outcome and duration (the event loop's thread only)."""
    counter = _ATTEMPT_COUNTERS.get(outcome)
    if counter is None:
        counter = _ATTEMPT_COUNTERS[outcome] = WEBHOOK_DELIVERIES.labels(outcome)
    TALLY.count(counter)
    TALLY.observe(WEBHOOK_ATTEMPT_SECONDS, seconds)
