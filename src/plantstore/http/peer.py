"""Whether a request's client is still connected, asked of the kernel.

When a request body ends early, granian hands the app the same ``http.disconnect`` whether
the client went away or hyper refused the body's framing (a chunk size that overflows, is not
hex, or ends in a bare LF), and in the second case the client is still there, waiting for an
answer. The ASGI scope does not say which; the kernel does: the connection from
``scope["client"]`` to ``scope["server"]`` is still ``ESTABLISHED`` only if the client has
neither closed nor reset it.

The kernel is asked for that one socket through netlink's ``sock_diag`` (what ``ss`` uses):
one request and one answer, some microseconds, whatever the number of connections. Where
netlink is refused (a sandbox that filters it), the kernel's whole table (``/proc/net/tcp``)
is read instead, in a thread, at most ``CHECKS_PER_SECOND`` times a second (a read grows
with the connections open); past that, a body cut short is taken for a client that
left (the cheaper answer: none).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import struct
import time
from pathlib import Path

from starlette.types import Scope

_TABLES = (Path("/proc/net/tcp"), Path("/proc/net/tcp6"))
_ESTABLISHED = "01"
TCP_ESTABLISHED = 1
CHECKS_PER_SECOND = 5

# netlink sock_diag (linux/sock_diag.h, linux/inet_diag.h)
_NETLINK_SOCK_DIAG = 4
_SOCK_DIAG_BY_FAMILY = 20
_NLM_F_REQUEST = 1
_NLMSG_ERROR = 2
_NLMSG_HEADER = struct.Struct("=IHHII")  # length, type, flags, sequence, port id
# inet_diag_req_v2: family, protocol, extensions, pad, states, then inet_diag_sockid: source
# and destination ports (big-endian), addresses (16 bytes each), interface, cookie (two u32)
_REQUEST = struct.Struct("=BBBBI2H16s16sI2I")
_NO_COOKIE = 0xFFFFFFFF
_ENOENT = 2


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
_netlink_refused = False


async def client_still_there(scope: Scope) -> bool:
    """Whether the request's TCP connection is still established (see the module's note)."""
    global _netlink_refused
    if not _netlink_refused:
        try:
            return established_by_netlink(scope)
        except OSError:
            _netlink_refused = True
    if not _ALLOWANCE.take():
        return False
    return await asyncio.to_thread(still_connected, scope)


def established_by_netlink(scope: Scope) -> bool:
    """Ask ``sock_diag`` for the server's socket of this connection; OSError if netlink is
    refused. An IPv4 client accepted on an IPv6 socket is looked up as ``::ffff:a.b.c.d``."""
    client, server = scope.get("client"), scope.get("server")
    if not client or not server:
        return False
    try:
        local, remote = ipaddress.ip_address(server[0]), ipaddress.ip_address(client[0])
    except ValueError:
        return False  # not an IP address (a Unix socket): nothing to look up
    ends = (local, int(server[1]), remote, int(client[1]))
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, _NETLINK_SOCK_DIAG) as diag:
        state = _state(diag, *ends)
        if state is None and local.version == 4:
            mapped = (_mapped_v6(local), int(server[1]), _mapped_v6(remote), int(client[1]))
            state = _state(diag, *mapped)
    return state == TCP_ESTABLISHED


def _mapped_v6(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> ipaddress.IPv6Address:
    return ipaddress.IPv6Address(f"::ffff:{address}")


def _state(
    diag: socket.socket,
    local: ipaddress.IPv4Address | ipaddress.IPv6Address,
    local_port: int,
    remote: ipaddress.IPv4Address | ipaddress.IPv6Address,
    remote_port: int,
) -> int | None:
    """The TCP state of the one socket with these ends, or None if there is none."""
    family = socket.AF_INET if local.version == 4 else socket.AF_INET6
    request = _REQUEST.pack(
        family,
        socket.IPPROTO_TCP,
        0,
        0,
        0xFFFFFFFF,  # any state
        socket.htons(local_port),
        socket.htons(remote_port),
        local.packed.ljust(16, b"\0"),
        remote.packed.ljust(16, b"\0"),
        0,
        _NO_COOKIE,
        _NO_COOKIE,
    )
    header = _NLMSG_HEADER.pack(
        _NLMSG_HEADER.size + len(request), _SOCK_DIAG_BY_FAMILY, _NLM_F_REQUEST, 1, 0
    )
    diag.sendall(header + request)
    answer = diag.recv(65536)
    _, kind, _, _, _ = _NLMSG_HEADER.unpack_from(answer)
    if kind == _NLMSG_ERROR:
        (error,) = struct.unpack_from("=i", answer, _NLMSG_HEADER.size)
        if error == -_ENOENT:
            return None
        raise OSError(-error, "sock_diag refused the request")
    return answer[_NLMSG_HEADER.size + 1]  # inet_diag_msg: family, then state


def still_connected(scope: Scope) -> bool:
    """True if the request's TCP connection is still established according to
    ``/proc/net/tcp``; False if the client closed or reset it, or if that cannot be told."""
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
