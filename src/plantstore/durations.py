"""Durations as operators write them (``90s``, ``15m``, ``12h``, ``30d``, ``2w``): one notation
for token lifetimes, the sandbox TTL, webhook retention and the webhook retry schedule."""

from __future__ import annotations

import re

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
