"""The ceiling through granian's own interface (RSGI): the reference app's fixed 10-plant list,
answered in one call instead of ASGI's message dictionaries and two awaited sends.

    granian --interface rsgi --factory bench.apps.reference_rsgi:create_app

``bench/speed/interfaces.py`` times it beside ``reference_app`` to show what serving the hot routes over
RSGI could at most save a request.
"""

from __future__ import annotations

from typing import Any

from .reference_app import BODY

HEADERS = [("content-type", "application/json"), ("content-length", str(len(BODY)))]


class ReferenceApp:
    """RSGI app: every request answered with the same bytes."""

    async def __rsgi__(self, scope: Any, protocol: Any) -> None:
        protocol.response_bytes(200, HEADERS, BODY)


def create_app() -> ReferenceApp:
    """The app factory granian imports."""
    return ReferenceApp()
