"""Raw-socket probes, each on its own connection: (a) headers over 16 KiB and (a0) under it,
(b) headers and (c) a body at one byte per second, (d) a declared and (e) a chunked 10 MB body;
and one list request afterwards, which must still be served."""

from __future__ import annotations

import argparse
import select
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from urllib.parse import urlsplit

from harness.servers import Server

from .conn import Conn, describe, request_head

HEADER_BYTES = 17 * 1024  # over the 16 KiB head the service allows
UNDER_LIMIT_BYTES = 15 * 1024  # the control: must still be served
DECLARED_BYTES = 10_000_000


@dataclass
class Probe:
    key: str
    name: str
    goal: str
    passed: bool
    seconds: float
    outcome: str
    status: int | None = None
    bytes_sent: int | None = None  # trickled, or of the body


def head_of(size: int, host: str, token: str) -> bytes:
    """A GET list 10 whose request line and headers come to exactly ``size`` bytes."""
    base = request_head("GET", "/plants?limit=10", host, token)
    pads: list[str] = []
    missing = size - len(base)
    while missing > 0:
        line = f"X-Pad-{len(pads):02d}: "
        room = min(1000, missing - len(line) - 2)  # each line ends with CRLF
        if room < 1:  # too little left for another line: lengthen the previous one
            if pads:
                pads[-1] += "a" * missing
            break
        pads.append(line + "a" * room)
        missing -= len(pads[-1]) + 2
    return request_head("GET", "/plants?limit=10", host, token, *pads)


def probe_headers_of(size: int, host: str, port: int, token: str) -> Probe:
    """(a) over 16 KiB of headers: refused with 431, or the connection closed; (a0) the
    control, under 16 KiB: answered as usual."""
    head = head_of(size, f"{host}:{port}", token)
    conn = Conn(host, port)
    started = time.monotonic()
    try:
        conn.send_all(head)
        deadline = time.monotonic() + 10
        while not conn.done and time.monotonic() < deadline:
            conn.poll(0.2)
        took = time.monotonic() - started
        conn.drain(0.5)
    finally:
        conn.close()
    answer = conn.answer
    over = size > 16 * 1024
    passed = (
        answer.status == 431 or (answer.status is None and answer.closed)
        if over
        else answer.status == 200
    )
    return Probe(
        "a_big_headers" if over else "a0_headers_under_limit",
        f"({'a' if over else 'a0'}) {len(head) / 1024:g} KiB of headers",
        "431 or closed" if over else "200 (under the limit)",
        passed,
        took,
        describe(answer, took),
        answer.status,
    )


def probe_trickle(
    key: str,
    name: str,
    host: str,
    port: int,
    head: bytes,
    trickle: bytes,
    deadline: float,
    margin: float,
    observe: float,
) -> Probe:
    """Send ``head`` at once, then ``trickle`` one byte per second; time how long until the
    server answers or closes (from the first trickled byte), for up to ``observe`` seconds."""
    conn = Conn(host, port)
    try:
        if head:
            conn.send_all(head)
        started = time.monotonic()
        sent = 0
        while not conn.done and sent < len(trickle) and time.monotonic() - started < observe:
            sent += conn.send(trickle[sent : sent + 1])
            next_byte = started + sent  # one byte per second from the start
            while not conn.done and time.monotonic() < next_byte:
                conn.poll(max(0.0, min(0.2, next_byte - time.monotonic())))
        took = time.monotonic() - started
        if conn.answer.status is not None:
            conn.drain(1.0)
    finally:
        conn.close()
    answer = conn.answer
    cut = answer.closed or answer.status is not None
    outcome = describe(answer, took) if cut else f"still open after {took:.1f}s ({sent} bytes sent)"
    if cut:
        outcome += f", {sent} bytes trickled"
    return Probe(
        key,
        name,
        f"cut off within {deadline:g}s + {margin:g}s",
        cut and took <= deadline + margin,
        took,
        outcome,
        answer.status,
        sent,
    )


def probe_slow_headers(
    host: str, port: int, token: str, deadline: float, margin: float, observe: float
) -> Probe:
    """(b) the request head one byte per second (it is long enough never to finish)."""
    head = request_head("GET", "/plants?limit=10", f"{host}:{port}", token, f"X-Slow: {'a' * 200}")
    return probe_trickle(
        "b_slow_headers",
        "(b) headers at 1 byte/s",
        host,
        port,
        b"",
        head,
        deadline,
        margin,
        observe,
    )


def probe_slow_body(
    host: str, port: int, token: str, deadline: float, margin: float, observe: float
) -> Probe:
    """(c) a whole, valid head, then a 1,000-byte JSON body at one byte per second."""
    body = b'{"id": 1, "name": "' + b"a" * 970 + b'", "tag": "x"}'
    body = body + b" " * (1000 - len(body))
    head = request_head(
        "POST",
        "/plants",
        f"{host}:{port}",
        token,
        "Content-Type: application/json",
        f"Content-Length: {len(body)}",
    )
    return probe_trickle(
        "c_slow_body",
        "(c) body at 1 byte/s",
        host,
        port,
        head,
        body,
        deadline,
        margin,
        observe,
    )


def probe_oversized(host: str, port: int, token: str, chunked: bool, quick_limit: float) -> Probe:
    """(d) Content-Length 10,000,000, or (e) the same chunked, sent flat out: a 413 should come
    back quickly, while most of the body is still unsent."""
    framing = "Transfer-Encoding: chunked" if chunked else f"Content-Length: {DECLARED_BYTES}"
    head = request_head(
        "POST", "/plants", f"{host}:{port}", token, "Content-Type: application/json", framing
    )
    piece = b"a" * 65_536
    wire = b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece
    conn = Conn(host, port)
    started = time.monotonic()
    body_sent = 0
    pending = b""
    try:
        conn.send_all(head)
        while not conn.done and body_sent < DECLARED_BYTES and time.monotonic() - started < 30:
            if not pending:
                pending = wire
            _, writable, _ = select.select([], [conn.sock], [], 0.05)
            if writable:
                n = conn.send(pending)
                pending = pending[n:]
                body_sent += n
            conn.poll(0)
        if chunked and not conn.done:
            conn.send(b"0\r\n\r\n")
        while not conn.done and time.monotonic() - started < 30:
            conn.poll(0.2)
        took = time.monotonic() - started
        conn.drain(1.0)
    finally:
        conn.close()
    answer = conn.answer
    passed = answer.status == 413 and took <= quick_limit and body_sent < DECLARED_BYTES
    key, name = (
        ("e_chunked_10mb", "(e) 10 MB chunked, no length")
        if chunked
        else ("d_declared_10mb", "(d) Content-Length 10,000,000")
    )
    return Probe(
        key,
        name,
        f"413 within {quick_limit:g}s, unread",
        passed,
        took,
        f"{describe(answer, took)}; {body_sent / 1e6:.2f} MB of "
        f"{DECLARED_BYTES / 1e6:.0f} MB sent by then",
        answer.status,
        body_sent,
    )


def run_probes(server: Server, args: argparse.Namespace) -> list[Probe]:
    parts = urlsplit(server.base_url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    token = server.token
    header_deadline = args.header_timeout or 10.0
    body_deadline = args.body_timeout or 30.0
    # --quick watches just past the deadlines; a full run long enough to see where the
    # server really cuts a slow body off (twice the deadline, if it reads the rest first)
    observe = args.observe or (
        max(header_deadline, body_deadline) + args.margin + 5
        if args.quick
        else 2 * body_deadline + args.margin + 8
    )
    print(
        f"  (a), (a0), (d), (e), then (b) and (c) together (each watched up to {observe:.0f}s)",
        flush=True,
    )
    first = [
        probe_headers_of(HEADER_BYTES, host, port, token),
        probe_headers_of(UNDER_LIMIT_BYTES, host, port, token),
    ]
    last = [
        probe_oversized(host, port, token, False, args.quick_413),
        probe_oversized(host, port, token, True, args.quick_413),
    ]
    slow: list[Callable[[], Probe]] = [
        lambda: probe_slow_headers(host, port, token, header_deadline, args.margin, observe),
        lambda: probe_slow_body(host, port, token, body_deadline, args.margin, observe),
    ]
    with ThreadPoolExecutor(len(slow)) as pool:
        middle = list(pool.map(lambda probe: probe(), slow))
    return [*first, *middle, *last]


def still_serving(server: Server) -> str:
    """One list request after everything: the server must still answer it."""
    parts = urlsplit(server.base_url)
    conn = Conn(parts.hostname or "127.0.0.1", parts.port or 80)
    try:
        conn.send_all(request_head("GET", "/plants?limit=10", "x", server.token))
        deadline = time.monotonic() + 5
        while not conn.done and time.monotonic() < deadline:
            conn.poll(0.2)
    finally:
        conn.close()
    return describe(conn.answer, 0).removesuffix(" after 0.00s")
