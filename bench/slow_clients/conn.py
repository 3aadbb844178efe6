"""A raw, non-blocking client connection for the probes: send at any pace, and see whether
the server answered (its status line) or closed the connection."""

from __future__ import annotations

import re
import select
import socket
import time
from dataclasses import dataclass


@dataclass
class Answer:
    """What came back on a connection: a status line and/or the server closing it."""

    status: int | None = None
    closed: bool = False
    how: str = ""
    head: bytes = b""


class Conn:
    def __init__(self, host: str, port: int) -> None:
        self.sock = socket.create_connection((host, port), timeout=5)
        self.sock.setblocking(False)
        self.answer = Answer()
        self.buffer = b""

    def close(self) -> None:
        self.sock.close()

    def poll(self, wait: float) -> bool:
        """Read whatever arrived within ``wait`` s; True once the server answered or closed."""
        readable, _, _ = select.select([self.sock], [], [], wait)
        if readable:
            self._read()
        return self.done

    @property
    def done(self) -> bool:
        return self.answer.closed or self.answer.status is not None

    def _read(self) -> None:
        try:
            data = self.sock.recv(65536)
        except BlockingIOError:
            return
        except OSError as exc:
            self._closed(f"reset ({exc.strerror or exc})")
            return
        if not data:
            self._closed("closed (FIN)")
            return
        self.buffer += data
        if self.answer.status is None:
            match = re.match(rb"HTTP/1\.[01] (\d{3})", self.buffer)
            if match:
                self.answer.status = int(match.group(1))
                self.answer.head = self.buffer.split(b"\r\n\r\n", 1)[0][:400]

    def _closed(self, how: str) -> None:
        self.answer.closed, self.answer.how = True, how

    def send(self, data: bytes) -> int:
        """Send what the socket takes now; 0 and ``closed`` set when the server is gone."""
        try:
            return self.sock.send(data)
        except BlockingIOError:
            return 0
        except OSError as exc:
            self._closed(f"send failed ({exc.strerror or exc})")
            return 0

    def send_all(self, data: bytes, limit: float = 10.0) -> None:
        deadline = time.monotonic() + limit
        while data and not self.answer.closed and time.monotonic() < deadline:
            _, writable, _ = select.select([], [self.sock], [], 0.5)
            if writable:
                data = data[self.send(data) :]
            self.poll(0)

    def drain(self, wait: float) -> None:
        """After an answer, wait a little for the close (or for more of the head)."""
        deadline = time.monotonic() + wait
        while not self.answer.closed and time.monotonic() < deadline:
            self.poll(min(0.2, deadline - time.monotonic()))


def describe(answer: Answer, seconds: float) -> str:
    parts = []
    if answer.status is not None:
        parts.append(f"{answer.status}")
    if answer.closed:
        parts.append(answer.how)
    elif answer.status is not None:
        parts.append("connection left open")
    return f"{', '.join(parts) or 'nothing'} after {seconds:.2f}s"


def request_head(method: str, path: str, host: str, token: str, *extra: str) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}", f"Authorization: Bearer {token}"]
    return ("\r\n".join([*lines, *extra]) + "\r\n\r\n").encode()
