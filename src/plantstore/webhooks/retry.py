"""What an attempt's answer means: delivered, retry when, or give up (and disable)."""

from __future__ import annotations

import email.utils
import random

from .answer import Answer
from .store import Outcome

_MAX_RETRY_AFTER = 30 * 86400.0  # a receiver asking for more is waited on this long


def outcome_of(answer: Answer, attempts_before: int, schedule: tuple[float, ...]) -> Outcome:
    """``attempts_before`` attempts had failed before this one."""
    if answer.status is not None and 200 <= answer.status < 300:
        return Outcome.DELIVERED
    if answer.status == 410:
        return Outcome.GONE
    return Outcome.RETRY if attempts_before + 1 < len(schedule) else Outcome.FAILED


def retry_delay(
    answer: Answer, attempts_before: int, schedule: tuple[float, ...], now: float
) -> float:
    """The schedule's next delay with ±10 % jitter; at least a 429's or 503's Retry-After."""
    delay = schedule[attempts_before + 1] * random.uniform(0.9, 1.1)
    if answer.status in (429, 503) and answer.retry_after is not None:
        asked = parse_retry_after(answer.retry_after, now)
        if asked is not None:
            delay = max(delay, min(asked, _MAX_RETRY_AFTER))
    return delay


def parse_retry_after(value: str, now: float) -> float | None:
    """Seconds from delay-seconds or an HTTP date (RFC 9110 §10.2.3); None if neither."""
    value = value.strip()
    if value.isascii() and value.isdigit():
        return float(value[:12])
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    return max(0.0, when.timestamp() - now)
