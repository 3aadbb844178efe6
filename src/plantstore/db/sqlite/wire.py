"""What travels between the processes of a machine and its writer: framed pickles.

Each message is a 4-byte length and a pickle. A pickle runs code as it loads, so each side
first asks the kernel who the other is (``same_user``).
"""

from __future__ import annotations

import os
import pickle
import socket
import struct
from collections.abc import Iterator
from typing import Any

from ...errors import StoreUnavailable

_LENGTH = struct.Struct("!I")
_CREDENTIALS = struct.Struct("3i")  # struct ucred: pid, uid, gid


def frame(message: object) -> bytes:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return _LENGTH.pack(len(data)) + data


class Frames:
    """Splits a byte stream into the messages ``frame`` made."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> Iterator[Any]:
        buffer = self._buffer
        buffer += data
        start = 0
        while len(buffer) - start >= 4:
            (size,) = _LENGTH.unpack_from(buffer, start)
            end = start + 4 + size
            if end > len(buffer):
                break
            yield pickle.loads(memoryview(buffer)[start + 4 : end])  # noqa: S301 (same user)
            start = end
        del buffer[:start]


def same_user(sock: socket.socket) -> bool:
    """Whether the process at the other end runs as this process's user."""
    credentials = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _CREDENTIALS.size)
    _, uid, _ = _CREDENTIALS.unpack(credentials)
    return bool(uid == os.geteuid())


def portable(error: BaseException | None) -> BaseException | None:
    """An error as the other process can unpickle it: a 503 stays a 503, and one that would
    not travel whole goes as what it says."""
    if error is None:
        return None
    if isinstance(error, StoreUnavailable):
        return StoreUnavailable(error.message, error.kind)
    try:
        pickle.loads(pickle.dumps(error))  # noqa: S301 (our own object)
    except Exception:
        return RuntimeError(f"{type(error).__name__}: {error}")
    return error
