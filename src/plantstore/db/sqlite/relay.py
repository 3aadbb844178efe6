"""Carrying writes between the processes of a machine and the one that owns the writer.

A write is a declared operation (``ops.WriteOp``) and its arguments, framed pickles
(``wire.py``) over a Unix socket in the abstract namespace, which vanishes with the process
that holds it. An operation goes by its name the first time a connection sends it, then by
its number on that connection (the order it was first sent in): a small int, and a list index
for the owner. The owner answers each process's writes of a commit in one message: numbers,
results and errors.

``Service`` is the owner's side: a thread that reads every other process's writes and queues
them on the owner's ``Writer``. ``RemoteWriter`` is the other side, on an event loop: one
connection, its writes sent once per turn of the loop, its answers resolving their futures.

A pickle runs code as it loads, and any local user may connect to an abstract socket: each
side asks the kernel who the other is (``SO_PEERCRED``) and hangs up unless it runs as the
same user, who could run anything as this process anyway.

An owner that stops answers every write it took, then says goodbye (``GOODBYE``) before it
hangs up, also on connections it never accepted: a write still unanswered then was never
read, so it was not made, and its sender may send it again to the next owner
(``WriteNotTaken``). A write cut off without a goodbye (the owner died) may have been made.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import math
import os
import selectors
import socket
import threading
import time
from typing import Any, cast

from ...errors import StoreUnavailable
from ..health import not_answering
from .ops import AnyOp, find
from .wire import Frames, frame, portable, same_user
from .writer import Writer

log = logging.getLogger(__name__)

_READ_SIZE = 256 * 1024
SWEEP_S = 0.5
SEND_TIMEOUT_S = 2.0  # an owner gives up on a process that stops reading its answers
Answer = tuple[int, Any, BaseException | None]  # a write's number, its result or its error


_GONE = "the machine's database writer went away; retry shortly"
GOODBYE = None  # the owner's last message: nothing unanswered was taken


class WriteNotTaken(StoreUnavailable):
    """The write never reached an owner that would make it: it may be sent again."""


def writer_gone() -> StoreUnavailable:
    return StoreUnavailable(_GONE, "writer_gone")


def write_not_taken() -> WriteNotTaken:
    return WriteNotTaken(_GONE, "writer_gone")


class _Peer:
    """Another process, as the owner sees it: where its writes' answers go."""

    def __init__(self, sock: socket.socket) -> None:
        sock.settimeout(SEND_TIMEOUT_S)  # recv comes only when select saw data
        self.sock = sock
        self.frames = Frames()
        self.ops: list[AnyOp | None] = []  # by their numbers on this connection
        self._lock = threading.RLock()  # the writer's and the flusher's threads both answer
        self.closed = False

    def op(self, key: object) -> AnyOp | None:
        """The operation a message names: by name the first time, by number after."""
        if type(key) is int:
            return self.ops[key] if 0 <= key < len(self.ops) else None
        op = find(key) if type(key) is str else None
        self.ops.append(op)  # None too: the numbers after it stay in step
        return op

    def send(self, answers: list[Answer]) -> None:
        if any(error is not None for _, _, error in answers):  # rare: made to travel
            answers = [(n, result, portable(error)) for n, result, error in answers]
        try:
            data = frame(answers)
        except Exception as exc:  # a result that does not pickle: a fault of ours
            log.exception("answers of the database's writer could not be sent")
            data = frame(
                [(n, None, RuntimeError(f"unsendable answer: {exc}")) for n, _, _ in answers]
            )
        self.send_bytes(data)

    def send_bytes(self, data: bytes) -> None:
        with self._lock:
            if self.closed:
                return
            try:
                self.sock.sendall(data)
            except OSError as exc:
                log.warning("a worker stopped taking the writer's answers (%s)", exc)
                self.close()

    def close(self, release: bool = False) -> None:
        """Hang up (the relay's thread then sees the end and drops this peer); ``release``
        also frees the socket, once it is out of the selector."""
        with self._lock:  # no answer is being sent meanwhile, nor will be
            self.closed = True
            with contextlib.suppress(OSError):
                self.sock.shutdown(socket.SHUT_RDWR)
            if release:
                self.sock.close()


class Service:
    """The owner's side: takes other processes' writes to ``writer`` from ``address``."""

    def __init__(self, writer: Writer, address: str) -> None:
        self._writer = writer
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(address)
        self._listener.listen(128)
        self._listener.setblocking(False)
        self._wake_read, self._wake_write = os.pipe()
        self._peers: list[_Peer] = []
        self._thread = threading.Thread(target=self._run, name="plantstore-relay", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop_taking(self) -> None:
        """Queue the writes already sent, then take no more (the writer's stop commits them)."""
        os.write(self._wake_write, b"x")
        self._thread.join()

    def close(self) -> None:
        """Once the writer has answered everything: say goodbye to every process, those whose
        connections were never accepted too, and hang up."""
        goodbye = frame(GOODBYE)
        for peer in self._peers:
            peer.send_bytes(goodbye)
            peer.close(release=True)
        with contextlib.suppress(OSError):
            while True:  # ends with BlockingIOError once none is waiting
                sock, _ = self._listener.accept()
                with contextlib.closing(sock):
                    sock.settimeout(SEND_TIMEOUT_S)
                    sock.sendall(goodbye)
        self._listener.close()
        os.close(self._wake_read)
        os.close(self._wake_write)

    def _run(self) -> None:
        selector = selectors.DefaultSelector()
        selector.register(self._listener, selectors.EVENT_READ)
        selector.register(self._wake_read, selectors.EVENT_READ)
        try:
            while self._serve(selector, None):
                pass
            self._serve(selector, 0)  # what arrived before the stop
        except Exception:
            log.exception("the writer's relay stopped on a fault; other workers' writes fail")
        finally:
            selector.close()

    def _serve(self, selector: selectors.BaseSelector, timeout: float | None) -> bool:
        """Take what is ready; False once told to stop."""
        going = True
        for key, _ in selector.select(timeout):
            if key.fileobj is self._listener:
                self._accept(selector)
            elif key.fileobj == self._wake_read:
                going = False
            else:
                self._read(selector, key.data)
        return going

    def _accept(self, selector: selectors.BaseSelector) -> None:
        with contextlib.suppress(BlockingIOError):
            sock, _ = self._listener.accept()
            if not same_user(sock):
                log.warning("refused a connection to the database's writer from another user")
                sock.close()
                return
            peer = _Peer(sock)
            self._peers.append(peer)
            selector.register(sock, selectors.EVENT_READ, peer)

    def _read(self, selector: selectors.BaseSelector, peer: _Peer) -> None:
        try:
            data = peer.sock.recv(_READ_SIZE)
        except OSError:
            data = b""
        if not data:  # the process stopped or died: its answers have nowhere to go
            self._drop(selector, peer)
            return
        try:
            messages = list(peer.frames.feed(data))
        except Exception:  # another version's write, say: that process alone is hung up on
            log.exception("a write sent to the database's writer could not be read")
            self._drop(selector, peer)
            return
        submit = self._writer.submit_for
        for number, key, args, deadline in messages:
            op = peer.op(key)
            if op is not None:
                submit(peer, number, op, args, deadline)
            elif number:  # a write this version does not have: refused, as any fault of ours
                peer.send([(number, None, RuntimeError(f"no write named {key!r} here"))])

    def _drop(self, selector: selectors.BaseSelector, peer: _Peer) -> None:
        selector.unregister(peer.sock)
        peer.close(release=True)
        self._peers.remove(peer)


class _Connection(asyncio.Protocol):
    """One process's connection to the owner, on its event loop. A write the owner has not
    answered within ``patience`` seconds (an owner stopped, or stuck) is a 503; a sweep every
    ``SWEEP_S`` finds them, rather than a timer for each write."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, patience: float, sock: socket.socket
    ) -> None:
        self.loop = loop
        self._sock = sock  # open until connection_lost returns
        self.pending: dict[int, tuple[asyncio.Future[Any], float]] = {}  # and when it was sent
        self.lost = False
        self.handed_over = False  # the owner said goodbye: what is unanswered was not taken
        self._patience = patience
        self._frames = Frames()
        self._outgoing: list[bytes] = []
        self._numbers: dict[AnyOp, int] = {}  # of the operations sent on this connection
        self._transport: asyncio.Transport | None = None
        self._sweeper: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # a stream's: it writes
        self._sweeper = self.loop.call_later(SWEEP_S, self._sweep)

    def _sweep(self) -> None:
        late = self.loop.time() - self._patience + SWEEP_S  # never answered past patience
        for number, (future, sent) in list(self.pending.items()):
            if sent < late:
                del self.pending[number]
                if not future.done():
                    future.set_exception(not_answering())
        if not self.lost:
            self._sweeper = self.loop.call_later(SWEEP_S, self._sweep)

    def message(self, number: int, op: AnyOp, args: tuple[Any, ...], deadline: float) -> bytes:
        """A write as sent on this connection: its operation by number once the name went."""
        known = self._numbers.get(op)
        if known is not None:
            return frame((number, known, args, deadline))
        data = frame((number, op.name, args, deadline))  # may fail: then nothing is noted
        self._numbers[op] = len(self._numbers)
        return data

    def send(self, data: bytes) -> None:
        """Send with whatever else this turn of the loop sends: one write a turn."""
        if not self._outgoing:
            self.loop.call_soon(self._flush)
        self._outgoing.append(data)

    def _flush(self) -> None:
        if self._transport is not None and not self.lost:
            self._transport.write(b"".join(self._outgoing))
        self._outgoing.clear()

    def data_received(self, data: bytes) -> None:
        pending = self.pending
        for answers in self._frames.feed(data):
            if answers is GOODBYE:
                self.handed_over = True
                continue
            for number, result, error in answers:
                waiting = pending.pop(number, None)
                if waiting is None or waiting[0].done():  # the caller went away
                    continue
                future = waiting[0]
                if error is None:
                    future.set_result(result)
                else:
                    future.set_exception(error)

    def connection_lost(self, exc: Exception | None) -> None:
        if exc is not None:  # a send found the owner gone: what it sent first may be unread
            self._read_the_rest()
        self.lost = True
        if self._sweeper is not None:
            self._sweeper.cancel()
        pending, self.pending = self.pending, {}
        gone = write_not_taken if self.handed_over else writer_gone
        for future, _ in pending.values():
            if not future.done():
                future.set_exception(gone())

    def _read_the_rest(self) -> None:
        """Read what the owner sent before it hung up: a send that fails stops the transport
        reading, and the answers and goodbye waiting unread would otherwise be lost."""
        try:
            while data := self._sock.recv(_READ_SIZE):
                self.data_received(data)
        except OSError:
            pass  # BlockingIOError: all is read; or the socket is closed already
        except Exception:  # an answer that does not unpickle: what is unanswered stays so
            log.exception("the last answers of the database's writer could not be read")

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()


class RemoteWriter:
    """Another process's writer, reached at ``address``; every failure to reach it is a 503."""

    def __init__(self, address: str, patience: float) -> None:
        self._address = address
        self._patience = patience
        self._connection: _Connection | None = None
        self._numbers = itertools.count(1)

    async def connect(self) -> _Connection:
        """The connection on this loop, made anew if the last one was lost."""
        loop = asyncio.get_running_loop()
        connection = self._connection
        if connection is not None and not connection.lost and connection.loop is loop:
            return connection
        if connection is not None:
            connection.close()
            self._connection = None
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.setblocking(False)
        try:
            sock.connect(self._address)  # a Unix socket connects at once, or not at all
        except OSError as exc:
            sock.close()
            raise write_not_taken() from exc
        if not same_user(sock):
            sock.close()
            raise PermissionError(
                "the database's writer runs as another user: run this as the service's user"
            )
        try:
            _, made = await loop.create_unix_connection(
                lambda: _Connection(loop, self._patience, sock), sock=sock
            )
        except OSError as exc:
            sock.close()
            raise write_not_taken() from exc
        self._connection = made
        return made

    async def submit(self, op: AnyOp, args: tuple[Any, ...]) -> Any:
        connection = await self.connect()
        number = next(self._numbers)
        deadline = time.monotonic() + self._patience  # the owner makes none after it
        data = connection.message(number, op, args, deadline)
        future: asyncio.Future[Any] = connection.loop.create_future()
        connection.pending[number] = future, connection.loop.time()
        connection.send(data)
        return await future

    async def submit_nowait(self, op: AnyOp, args: tuple[Any, ...]) -> None:
        connection = await self.connect()
        connection.send(connection.message(0, op, args, math.inf))

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None
