"""What one webhook attempt got, and how long an attempt may take.

Apart from ``client`` so that the dispatcher, the retry rules and the attempt log need not
import aiohttp: it loads with a process's first delivery, not in every worker.
"""

from __future__ import annotations

from dataclasses import dataclass

TOTAL_TIMEOUT = 15.0
CONNECT_TIMEOUT = 5.0


@dataclass(frozen=True, slots=True)
class Answer:
    """What one attempt got: a status (and Retry-After), or an error without one."""

    status: int | None
    retry_after: str | None
    error: str | None
    duration: float
