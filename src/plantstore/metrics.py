"""Prometheus metrics: what each worker counts.

``plantstore serve`` points ``PROMETHEUS_MULTIPROC_DIR`` at a fresh directory before the
workers start; each worker writes its samples there, and the metrics listener in the main
process (``metrics_server.py``) adds them up. Only workers import this module, after the
variable is set. Where no server set it (the app in a test client), samples stay in memory.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from prometheus_client import Counter, Gauge, Histogram

T = TypeVar("T")
UNMATCHED_ROUTE = "unmatched"  # one label for every unknown path, so scanners add no series
# Any other method name a client makes up is counted as "other", for the same reason.
KNOWN_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
# Store operations on the request path; the rest run from the command line.
TIMED_STORE_OPERATIONS = ("create_plant", "list_plants", "delete_plant", "find_token", "ping")

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


class RequestMetrics:
    """Counts one answered request; each label set's children are looked up once."""

    def __init__(self) -> None:
        self._counters: dict[tuple[str, str, int], Any] = {}
        self._timers: dict[tuple[str, str], Any] = {}

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        if method not in KNOWN_METHODS:
            method = "other"
        counter = self._counters.get((method, route, status))
        if counter is None:
            counter = REQUESTS.labels(method, route, str(status))
            self._counters[method, route, status] = counter
        counter.inc()
        timer = self._timers.get((method, route))
        if timer is None:
            timer = self._timers[method, route] = REQUEST_SECONDS.labels(method, route)
        timer.observe(seconds)


def timed(operation: str, call: Callable[..., Awaitable[T]]) -> Callable[..., Awaitable[T]]:
    """``call`` with each of its durations observed as store operation ``operation``."""
    histogram = STORE_SECONDS.labels(operation)

    async def timed_call(*args: Any, **kwargs: Any) -> T:
        started = time.perf_counter()
        try:
            return await call(*args, **kwargs)
        finally:
            histogram.observe(time.perf_counter() - started)

    return timed_call


def time_store_operations(store: object) -> None:
    """Observe the duration of every request-path store call (the store itself stays unaware)."""
    for operation in TIMED_STORE_OPERATIONS:
        setattr(store, operation, timed(operation, getattr(store, operation)))


def observe_commit(writes: int) -> None:
    COMMIT_BATCH.observe(writes)
