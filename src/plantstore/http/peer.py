"""Whether a request's client is still connected, asked of the kernel.

When a request body ends early, granian hands the app the same ``http.disconnect`` whether
the client went away or hyper refused the body's framing (a chunk size that overflows, is not
hex, or ends in a bare LF), and in the second case the client is still there, waiting for an
answer. The ASGI scope does not say which; the kernel's table of TCP sockets does: the
connection from ``scope["client"]`` to ``scope["server"]`` is still ``ESTABLISHED`` only if
the client has neither closed nor reset it. Read on that rare path only, and sparingly: the
kernel writes the whole table for each read (about 20 ms with 10,000 connections open), so a
worker reads it in a thread, at most ``CHECKS_PER_SECOND`` times a second; past that, a body
cut short is taken for a client that left (the cheaper answer: none).
"""

from __future__ import annotations

import asyncio
import ipaddress
import struct
import time
from pathlib import Path

from starlette.types import Scope

_TABLES = (Path("/proc/net/tcp"), Path("/proc/net/tcp6"))
_ESTABLISHED = "01"
CHECKS_PER_SECOND = 5


class _Allowance:
    """At most ``CHECKS_PER_SECOND`` checks in each second of this process's clock."""

    def __init__(self) -> None:
        self._second = -1
        self._used = 0

    def take(self) -> bool:
        second = int(time.monotonic())
        if second != self._second:
            self._second, self._used = second, 0
        self._used += 1
        return self._used <= CHECKS_PER_SECOND


_ALLOWANCE = _Allowance()


async def client_still_there(scope: Scope) -> bool:
    """``still_connected``, off the event loop and within this worker's allowance."""
    if not _ALLOWANCE.take():
        return False
    return await asyncio.to_thread(still_connected, scope)


def still_connected(scope: Scope) -> bool:
    """True if the request's TCP connection is still established; False if the client closed
    or reset it, or if that cannot be told (no peer address, no ``/proc``)."""
    client, server = scope.get("client"), scope.get("server")
    if not client or not server:
        return False
    try:
        wanted = {(_hex(server[0], server[1]), _hex(client[0], client[1]))}
    except ValueError:
        return False  # not an IP address (a Unix socket): nothing to look up
    for table in _TABLES:
        try:
            lines = table.read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if (fields[1], fields[2]) in wanted or _mapped(fields, wanted):
                return fields[3] == _ESTABLISHED
    return False


def _hex(host: str, port: int | str) -> str:
    """An address as /proc/net/tcp writes it: its bytes in host order, and the port (granian
    gives ports as strings)."""
    address = ipaddress.ip_address(host)
    packed = address.packed
    words = [packed[i : i + 4] for i in range(0, len(packed), 4)]
    native = b"".join(struct.pack("=I", struct.unpack("!I", word)[0]) for word in words)
    return f"{native.hex().upper()}:{int(port):04X}"


def _mapped(fields: list[str], wanted: set[tuple[str, str]]) -> bool:
    """An IPv4 connection accepted on an IPv6 socket appears as ``::ffff:a.b.c.d``."""
    if len(fields[1]) != 37:
        return False
    local, remote = _unmapped(fields[1]), _unmapped(fields[2])
    return local is not None and remote is not None and (local, remote) in wanted


def _unmapped(entry: str) -> str | None:
    address, _, port = entry.partition(":")
    raw = bytes.fromhex(address)
    words = [struct.pack("!I", struct.unpack("=I", raw[i : i + 4])[0]) for i in range(0, 16, 4)]
    ip = ipaddress.IPv6Address(b"".join(words))
    if ip.ipv4_mapped is None:
        return None
    return _hex(str(ip.ipv4_mapped), int(port, 16))
