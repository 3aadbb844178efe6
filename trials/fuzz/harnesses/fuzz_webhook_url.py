"""Fuzz the webhook URL rule: ``split_webhook_url`` and the address check on arbitrary text.

The only exception allowed is the 400 (``BadRequest``). An accepted URL is absolute http or
https with a host and no credentials, as urllib reads it. For a host that is an address, the
SSRF verdict (``is_public``) must refuse every address in the ranges docs/webhooks.md names,
in their IPv4-mapped forms too, checked against a reference built from the range list.

    .venv/bin/python -m trials.fuzz.harnesses.fuzz_webhook_url -runs=100000
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

from .fuzzlib import fuzz, instrumented_imports

with instrumented_imports():
    from plantstore.errors import BadRequest
    from plantstore.webhooks.addresses import is_public, literal_address, split_webhook_url

_REFUSED = [
    ipaddress.ip_network(net)
    for net in (
        "0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16",
        "172.16.0.0/12", "192.0.0.0/24", "192.0.2.0/24", "192.168.0.0/16", "198.18.0.0/15",
        "198.51.100.0/24", "203.0.113.0/24", "224.0.0.0/4", "240.0.0.0/4",
        "::/128", "::1/128", "fc00::/7", "fe80::/10", "ff00::/8", "2001:db8::/32",
    )
]  # fmt: skip


def _must_refuse(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return any(address in network for network in _REFUSED if network.version == address.version)


def test_one_input(data: bytes) -> None:
    text = data.decode("utf-8", errors="replace")
    try:
        parts = split_webhook_url(text)
    except BadRequest as exc:
        refusal = exc
    else:
        _check_accepted(text, parts.hostname or "")
        return
    assert refusal.status == 400, refusal
    assert "url" in refusal.message, refusal.message


def _check_accepted(text: str, host: str) -> None:
    again = urlsplit(text)
    assert again.scheme in ("http", "https"), text
    assert again.hostname, text
    assert again.username is None, text
    assert again.password is None, text
    address = literal_address(host)
    if address is not None and _must_refuse(address):
        assert not is_public(address), f"{address} passed the SSRF rule"


SEEDS = [
    b"https://hooks.example.com/plants",
    b"http://127.0.0.1:8000/hook",
    b"http://[::ffff:10.0.0.1]/",
    b"http://[::1]/",
    b"http://169.254.169.254/latest/meta-data/",
    b"http://user:pw@8.8.8.8/",
    b"file:///etc/passwd",
    b"http://100.64.0.1/",
    b"http://[fe80::1%25eth0]/",
    b"http://0x7f.1/",
    b"http://8.8.8.8:0/",
    b"http:// 8.8.8.8/",
]

if __name__ == "__main__":
    fuzz(test_one_input, SEEDS, max_len=512)
