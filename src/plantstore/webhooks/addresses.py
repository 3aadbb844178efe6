"""The SSRF rule: a webhook may reach only globally routable addresses.

Checked when a user subscribes (the URL's literal address, or every address its name
resolves to) and again when connecting (``client.GuardedResolver`` filters the very
addresses the connection will use, so a name that changes its answer gains nothing).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import SplitResult, urlsplit

from ..errors import BadRequest

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
MAX_URL_LENGTH = 2048
LOOKUP_TIMEOUT = 5.0  # seconds a subscribe-time name lookup may take before a 400
# Subscribe-time lookups run on threads of their own, so names that hang keep at most these
# busy (and never the loop's default executor, which other work shares).
_LOOKUPS = ThreadPoolExecutor(max_workers=4, thread_name_prefix="webhook-lookup")

# Refused whatever the running Python's ``ipaddress`` tables say (they differ between patch
# releases, and 3.11 accepts fec0::/10 and 3fff::/20): IANA's special-purpose ranges that are
# not globally reachable, whole (a few exceptions inside 192.0.0.0/24 and 2001::/23 are
# anycast services, never a webhook receiver), and the deprecated ones.
NOT_GLOBAL = tuple(
    ipaddress.ip_network(network)
    for network in (
        "0.0.0.0/8",  # "this network"
        "10.0.0.0/8",  # private
        "100.64.0.0/10",  # carrier-grade NAT
        "127.0.0.0/8",  # loopback
        "169.254.0.0/16",  # link-local, cloud metadata
        "172.16.0.0/12",  # private
        "192.0.0.0/24",  # IETF protocol assignments
        "192.0.2.0/24",  # documentation (TEST-NET-1)
        "192.88.99.0/24",  # deprecated 6to4 relay anycast
        "192.168.0.0/16",  # private
        "198.18.0.0/15",  # benchmarking
        "198.51.100.0/24",  # documentation (TEST-NET-2)
        "203.0.113.0/24",  # documentation (TEST-NET-3)
        "224.0.0.0/4",  # multicast
        "240.0.0.0/4",  # reserved, and the limited broadcast address
        "::/128",  # unspecified
        "::1/128",  # loopback
        "64:ff9b:1::/48",  # local-use IPv4/IPv6 translation
        "100::/64",  # discard-only
        "100:0:0:1::/64",  # dummy prefix
        "2001::/23",  # IETF protocol assignments (Teredo, benchmarking, ORCHID, ...)
        "2001:db8::/32",  # documentation
        "3fff::/20",  # documentation
        "5f00::/16",  # segment routing (SRv6) SIDs
        "fc00::/7",  # unique local
        "fe80::/10",  # link-local
        "fec0::/10",  # deprecated site-local
        "ff00::/8",  # multicast
    )
)


class RefusedAddress(OSError):
    """A webhook URL names or resolves to an address the SSRF rule forbids."""


def is_public(address: IPAddress) -> bool:
    """Whether ``address`` is globally routable: not loopback, private, link-local (cloud
    metadata), carrier-grade NAT, multicast, reserved or unspecified, nor a v4-mapped,
    6to4 or NAT64 form of one of these."""
    if isinstance(address, ipaddress.IPv6Address):
        embedded = address.ipv4_mapped or address.sixtofour
        if embedded is None and address in ipaddress.ip_network("64:ff9b::/96"):
            embedded = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        if embedded is not None:
            return is_public(embedded)
    if any(address in network for network in NOT_GLOBAL if network.version == address.version):
        return False
    return address.is_global and not (
        address.is_multicast
        or address.is_reserved
        or address.is_loopback
        or address.is_link_local
        or address.is_private
        or address.is_unspecified
    )


def literal_address(host: str) -> IPAddress | None:
    """The address ``host`` spells (``[::1]`` without brackets), or None for a name."""
    try:
        return ipaddress.ip_address(host.removeprefix("[").removesuffix("]").split("%")[0])
    except ValueError:
        return None


def split_webhook_url(url: str) -> SplitResult:
    """The parts of an absolute http(s) URL without credentials; 400 naming ``url`` if not."""
    if len(url) > MAX_URL_LENGTH:
        raise BadRequest(f"`url` must be at most {MAX_URL_LENGTH} characters")
    if any(ord(char) <= 0x20 or 0x7F <= ord(char) <= 0x9F or char.isspace() for char in url):
        raise BadRequest("`url` must not contain spaces or control characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise BadRequest("`url` is not a valid URL") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise BadRequest("`url` must be an absolute http or https URL")
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise BadRequest("`url` must not carry credentials")
    if port == 0:
        raise BadRequest("`url` has an invalid port")
    return parts


async def check_webhook_url(url: str, allow_private: bool, timeout: float = LOOKUP_TIMEOUT) -> None:
    """Refuse (400 naming ``url``) a URL a webhook may not be sent to, or whose name does not
    resolve within ``timeout`` seconds."""
    parts = split_webhook_url(url)
    if allow_private:
        return
    host = parts.hostname or ""
    literal = literal_address(host)
    if literal is not None:
        addresses = [literal]
    else:
        try:
            async with asyncio.timeout(timeout):
                addresses = await resolve(host, parts.port or 0)
        except TimeoutError:
            raise BadRequest(
                f"`url`'s host {host!r} did not resolve within {timeout:g} s"
            ) from None
        except (OSError, ValueError):  # UnicodeError (a ValueError): the idna codec refused it
            raise BadRequest(f"`url`'s host {host!r} does not resolve") from None
    if not addresses or not all(is_public(address) for address in addresses):
        raise BadRequest(
            "`url` must name a globally routable address, not a loopback, private or other "
            "non-global one; a server started with PLANTSTORE_WEBHOOK_ALLOW_PRIVATE=true "
            "accepts those (for local tries and private networks)"
        )


async def resolve(host: str, port: int) -> list[IPAddress]:
    """Every address ``host`` resolves to (A and AAAA), looked up on ``_LOOKUPS``."""
    infos = await asyncio.get_running_loop().run_in_executor(
        _LOOKUPS, socket.getaddrinfo, host, port, 0, socket.SOCK_STREAM, socket.IPPROTO_TCP
    )
    return [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos]
