"""The kernel tells whether a client is still connected: by netlink's sock_diag, and by the
``/proc/net/tcp`` table where netlink is refused; IPv4 clients on an IPv6 listener too."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable

import pytest
from starlette.types import Scope

from plantstore.http.peer import established_by_netlink, still_connected

Check = Callable[[Scope], bool]
CHECKS = [established_by_netlink, still_connected]


def pair(family: socket.AddressFamily, listen_on: str) -> tuple[socket.socket, Scope]:
    """A client connected over loopback, and the scope the server side would see."""
    listener = socket.socket(family)
    listener.bind((listen_on, 0))
    listener.listen()
    port = listener.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    served, _ = listener.accept()
    listener.close()
    scope = {
        "client": ("127.0.0.1", client.getsockname()[1]),
        "server": ("127.0.0.1", str(port)),  # granian gives the port as a string
        "_keep": served,  # the server's end stays open while the test runs
    }
    return client, scope


@pytest.mark.parametrize("check", CHECKS)
@pytest.mark.parametrize(
    ("family", "listen_on"), [(socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::")]
)
def test_an_open_connection_is_there_and_a_closed_one_is_not(
    check: Check, family: socket.AddressFamily, listen_on: str
) -> None:
    client, scope = pair(family, listen_on)
    try:
        assert check(scope)
        client.close()
        deadline = time.monotonic() + 5
        while check(scope):
            assert time.monotonic() < deadline, "still seen as connected after the close"
            time.sleep(0.01)
    finally:
        client.close()
        scope["_keep"].close()


@pytest.mark.parametrize("check", CHECKS)
def test_a_connection_that_never_was_is_not_there(check: Check) -> None:
    assert not check({"client": ("127.0.0.1", 1), "server": ("127.0.0.1", "2")})
    assert not check({"client": None, "server": ("127.0.0.1", "2")})
