"""How durations and moments are written: operators' durations (``90s``, ``15m``, ``12h``,
``30d``, ``2w``) for token lifetimes, the sandbox TTL, webhook retention and retry schedules;
and RFC 3339 UTC moments as the service and its command line print them."""

from __future__ import annotations

import re
from datetime import UTC, datetime

_DURATION = re.compile(r"([0-9]{1,9})([smhdw])")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3_600, "d": 86_400, "w": 604_800}


def parse_duration(text: str, *, allow_zero: bool = False) -> int:
    """Seconds in ``text``; a zero duration only where ``allow_zero`` says it means something."""
    match = _DURATION.fullmatch(text.strip())
    seconds = int(match.group(1)) * _UNIT_SECONDS[match.group(2)] if match else 0
    if match is None or (seconds == 0 and not allow_zero):
        raise ValueError(f"{text!r} is not a duration such as 90s, 15m, 12h, 30d or 2w")
    return seconds


def parse_schedule(text: str) -> tuple[int, ...]:
    """The delays before each attempt, e.g. ``"0s,5s,5m"``: three attempts at most."""
    return tuple(parse_duration(part, allow_zero=True) for part in text.split(","))


def rfc3339(timestamp: float) -> str:
    """``2026-11-23T18:04:05Z``: whole seconds, rounded down (never past an expiry)."""
    return datetime.fromtimestamp(int(timestamp), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
