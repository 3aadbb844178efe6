"""The metrics listener: ``/metrics`` on its own address, apart from the API.

The API's address serves exactly the contract's routes, all JSON but the docs page; the
Prometheus text format lives here instead, on ``PLANTSTORE_METRICS_ADDRESS`` (loopback unless
set). It runs in ``serve``'s main process, beside granian's supervisor, and adds up what every
worker wrote to the shared directory, so one scrape gives the instance's totals.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import cast

MULTIPROCESS_VARIABLE = "PROMETHEUS_MULTIPROC_DIR"  # prometheus_client's own


def serve_metrics(host: str, port: int, directory: str) -> None:
    """Serve the workers' metrics from ``directory`` on a daemon thread; OSError if unbound."""
    os.environ[MULTIPROCESS_VARIABLE] = directory  # before prometheus_client is imported
    from prometheus_client import CollectorRegistry, start_http_server
    from prometheus_client.multiprocess import MultiProcessCollector

    registry = CollectorRegistry()
    collector = cast(Callable[..., object], MultiProcessCollector)  # untyped in the library
    collector(registry, path=directory)
    start_http_server(port, addr=host, registry=registry)
