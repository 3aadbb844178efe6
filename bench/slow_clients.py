"""`make slow-clients`: normal traffic while slowhttptest holds 500 slow connections, and
raw-socket probes of the header size limit and the header and body deadlines.

One server (pinned to CPU 0) on a freshly seeded SQLite file. wrk (pinned to CPU 1) measures
list 10 throughput with no slow clients, then while slowhttptest (also on CPU 1) holds
``--slow-connections`` connections in slowloris mode (``-H``: headers never finished, GET
/plants), again with none, then in slow body mode (``-B``: POST /plants, Content-Length 8192,
a few bytes every 10 s), then once more with none. Each attack's rate is judged against the
mean of the quiet runs around it (absolute rates drift on a shared VM). slowhttptest opens
each connection once; should it exit because the server closed them all, it is started
again, so the pressure lasts as long as wrk does.

Then raw sockets, each on its own connection:
  (a) a request with 17 KiB of headers: 431 or the connection closed (and, as a control,
      (a0) 15 KiB: served as usual);
  (b) headers at one byte per second: cut off within the header deadline (10 s) + margin;
  (c) headers whole, then the body at one byte per second: cut off within the body deadline
      (30 s) + margin;
  (d) Content-Length 10,000,000 and the body sent flat out: a 413 quickly, before it is all
      sent;
  (e) the same 10 MB chunked (no Content-Length): a 413 before it is all sent.

Targets (the issue's, item 4): >= 90 % of the quiet throughput and zero errors under each
attack; every probe as above. Results go to bench/results/slow-clients-<stamp>.json.

    .venv/bin/python bench/slow_clients.py [--quick] [--seconds 10] [--slow-connections 500]
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import select
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import report
import soak
from harness import HERE, Server, pinned
from measure import Load, Measurement, Options, measure, warm_up
from phases import fresh_sqlite
from procstat import process_tree, rss_mb
from seed import Layout
from soak import open_files, worker_pids

RESULTS = HERE / "results"
RETAINED_TARGET = 0.90
HEADER_BYTES = 17 * 1024  # over the 16 KiB the issue allows
UNDER_LIMIT_BYTES = 15 * 1024  # the control: must still be served
DECLARED_BYTES = 10_000_000
CONTENT_LENGTH_SLOW = 8_192  # slowhttptest -B's declared body: well under the 64 KiB limit
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


# --- the server ------------------------------------------------------------------------------


def serve(options: Options, url: str, token: str, args: argparse.Namespace) -> Server:
    """soak.serve (pinned, limits out of the way: every slow client here is unauthenticated
    and on 127.0.0.1, like wrk, so a limit on failed authentications per address would lock
    wrk out too), with the deadlines as given, if given."""
    env = {}
    if args.header_timeout is not None:
        env["PLANTSTORE_HEADER_TIMEOUT"] = str(args.header_timeout)
    if args.body_timeout is not None:
        env["PLANTSTORE_BODY_TIMEOUT"] = str(args.body_timeout)
    return soak.serve(options, "slow-clients", url, token, **env)


def sockets_of(pids: list[int]) -> int:
    return open_files(pids, "socket:")


# --- slowhttptest, kept running ---------------------------------------------------------------


@dataclass(frozen=True)
class Attack:
    key: str
    label: str
    mode: tuple[str, ...]  # slowhttptest's mode flags


ATTACKS = (
    Attack(
        "slow_headers",
        "slowloris (-H): GET /plants, headers never finished",
        ("-H", "-t", "GET", "-x", "24"),
    ),
    Attack(
        "slow_body",
        f"slow body (-B): POST /plants, Content-Length {CONTENT_LENGTH_SLOW}, no token",
        ("-B", "-t", "POST", "-s", str(CONTENT_LENGTH_SLOW), "-x", "10"),
    ),
)


@dataclass
class AttackRun:
    """One slowhttptest process: how it ended and its per-second CSV."""

    started_s: float  # after the attack began
    ended_s: float
    exit_status: str
    rows: list[dict[str, int]]


@dataclass
class Point:
    t_s: float
    attacker_sockets: int  # slowhttptest's own descriptors: its connections, client side
    server_sockets: int  # every socket the server's processes hold (listeners, wrk, slow)
    worker_rss_mb: float


@dataclass
class Instance:
    """One live slowhttptest process."""

    process: subprocess.Popen[bytes]
    prefix: Path
    started_s: float
    peak: int = 0  # the most sockets it has held


class Attacker:
    """slowhttptest in the background. It opens each connection once, so when the server
    cuts them off (a header deadline) another instance is started as soon as the newest one,
    once full, falls below 90 % of its connections: like a slowloris client reconnecting.
    A sampler counts the slow connections (slowhttptest's sockets) and the server's sockets
    once a second."""

    def __init__(
        self, attack: Attack, server: Server, args: argparse.Namespace, workdir: Path
    ) -> None:
        self.attack, self.server, self.args, self.workdir = attack, server, args, workdir
        self.target: int = args.slow_connections
        self.stopping = threading.Event()
        self.started = time.monotonic()
        self.live: list[Instance] = []
        self.runs: list[AttackRun] = []
        self.points: list[Point] = []
        self.workers = worker_pids(server.pid)
        self._threads = [
            threading.Thread(target=self._keep_up, daemon=True),
            threading.Thread(target=self._sample, daemon=True),
        ]

    def command(self, prefix: Path) -> list[str]:
        args = self.args
        command = ["slowhttptest", *self.attack.mode, "-c", str(self.target)]
        command += ["-i", "10", "-r", "200", "-p", "3", "-l", str(args.seconds + 60)]
        command += ["-u", f"{self.server.base_url}/plants", "-g", "-o", str(prefix)]
        return pinned(command, args.attacker_cpus)

    def now(self) -> float:
        return time.monotonic() - self.started

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def held(self) -> int:
        """Slow connections open right now, over every live instance."""
        return sum(sockets_of([instance.process.pid]) for instance in list(self.live))

    def _spawn(self) -> None:
        prefix = self.workdir / f"{self.attack.key}-{len(self.runs) + len(self.live) + 1}"
        with prefix.with_suffix(".log").open("wb") as out:
            process = subprocess.Popen(self.command(prefix), stdout=out, stderr=subprocess.STDOUT)
        self.live.append(Instance(process, prefix, self.now()))

    def _finish(self, instance: Instance) -> None:
        self.live.remove(instance)
        log = instance.prefix.with_suffix(".log")
        self.runs.append(
            AttackRun(instance.started_s, self.now(), exit_status(log), read_csv(instance.prefix))
        )

    def _keep_up(self) -> None:
        self._spawn()
        while not self.stopping.wait(0.2):
            for instance in list(self.live):
                if instance.process.poll() is not None:
                    self._finish(instance)
            newest = self.live[-1] if self.live else None
            if newest is not None:
                newest.peak = max(newest.peak, sockets_of([newest.process.pid]))
            full = newest is not None and newest.peak >= 0.98 * self.target
            if newest is None or (full and self.held() < 0.9 * self.target):
                self._spawn()
        for instance in list(self.live):
            instance.process.send_signal(signal.SIGINT)  # it writes its CSV on the way
        for instance in list(self.live):
            try:
                instance.process.wait(10)
            except subprocess.TimeoutExpired:
                instance.process.kill()
                instance.process.wait()
            self._finish(instance)

    def _sample(self) -> None:
        while not self.stopping.is_set():
            tree = process_tree(self.server.pid)
            self.points.append(
                Point(round(self.now(), 1), self.held(), sockets_of(tree), rss_mb(self.workers))
            )
            self.stopping.wait(1.0)

    def wait_until_held(self, wanted: int, limit: float) -> float | None:
        """Seconds until slowhttptest holds ``wanted`` sockets; None if it never did."""
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            if self.held() >= wanted:
                return self.now()
            time.sleep(0.2)
        return None

    def stop(self) -> None:
        self.stopping.set()
        for thread in self._threads:
            thread.join(30)


def exit_status(log: Path) -> str:
    text = _ANSI.sub("", log.read_text(errors="replace"))
    found = re.findall(r"Exit status:\s*(.+)", text)
    return found[-1].strip() if found else "unknown"


def read_csv(prefix: Path) -> list[dict[str, int]]:
    """slowhttptest's per-second states (columns as its version names them)."""
    path = prefix.with_suffix(".csv")
    if not path.exists():
        return []
    with path.open(newline="") as handle:
        return [
            {key.strip(): int(value) for key, value in row.items() if value and value.isdigit()}
            for row in csv.DictReader(handle)
        ]


@dataclass
class AttackResult:
    key: str
    label: str
    quiet_rate: float
    measurement: Measurement
    held_after_s: float | None
    window: tuple[float, float]  # the wrk run, in attack seconds
    released_after_s: float | None
    idle_sockets: int
    runs: list[AttackRun] = field(default_factory=list)
    points: list[Point] = field(default_factory=list)
    quiet: list[Measurement] = field(default_factory=list)  # the quiet runs around it

    @property
    def retained(self) -> float:
        result = self.measurement.result
        return result.rate / self.quiet_rate if result and self.quiet_rate else 0.0

    @property
    def errors(self) -> int:
        result = self.measurement.result
        return result.errors + result.socket_errors if result else 0

    def held_in_window(self) -> tuple[int, float, int]:
        """Fewest, mean and most slow connections slowhttptest held while wrk ran."""
        inside = [p.attacker_sockets for p in self.points if self.inside(p.t_s)]
        if not inside:
            return (0, 0.0, 0)
        return (min(inside), sum(inside) / len(inside), max(inside))

    def cpu_cost(self) -> float | None:
        """How much more server CPU a request took under attack than in the quiet runs."""
        quiet = [m.cpu_us_per_request for m in self.quiet if m.cpu_us_per_request]
        attack = self.measurement.cpu_us_per_request
        if not quiet or not attack:
            return None
        return attack / (sum(quiet) / len(quiet)) - 1

    def inside(self, t: float) -> bool:
        return self.window[0] <= t <= self.window[1]


def run_attack(
    attack: Attack, server: Server, options: Options, args: argparse.Namespace
) -> AttackResult:
    """slowhttptest up to its connection count, then wrk; then stop it and time how long the
    server takes to let go of the connections. ``quiet_rate`` is filled in by the caller."""
    idle = sockets_of(process_tree(server.pid))
    attacker = Attacker(attack, server, args, options.workdir)
    print(f"  {attack.label}: starting slowhttptest -c {args.slow_connections}", flush=True)
    attacker.start()
    held = attacker.wait_until_held(round(0.98 * args.slow_connections), 20.0)
    if held is None:
        print("    slowhttptest never held its connections; measuring anyway", flush=True)
    else:
        print(f"    holding {args.slow_connections} after {held:.1f}s", flush=True)
    begun = attacker.now()
    row = measure(server, Load(), options, attack.key, f"list 10 during {attack.key}")
    window = (begun, attacker.now())
    attacker.stop()
    released = None
    stopped = time.monotonic()
    while time.monotonic() < stopped + 15:
        if sockets_of(process_tree(server.pid)) <= idle:
            released = time.monotonic() - stopped
            break
        time.sleep(0.2)
    return AttackResult(
        key=attack.key,
        label=attack.label,
        quiet_rate=0.0,
        measurement=row,
        held_after_s=held,
        window=window,
        released_after_s=released,
        idle_sockets=idle,
        runs=attacker.runs,
        points=attacker.points,
    )


# --- raw-socket probes -----------------------------------------------------------------------


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


# --- report ----------------------------------------------------------------------------------


def timeline(result: AttackResult, every: float) -> list[str]:
    """The sampler's points, thinned to one per ``every`` seconds."""
    lines = [f"      {'t s':>5} {'slow conns':>10} {'server sockets':>14} {'RSS MB':>7}"]
    shown = -every
    for point in result.points:
        if point.t_s - shown >= every:
            mark = " wrk" if result.inside(point.t_s) else ""
            lines.append(
                f"      {point.t_s:>5.0f} {point.attacker_sockets:>10} "
                f"{point.server_sockets:>14} {point.worker_rss_mb:>7.1f}{mark}"
            )
            shown = point.t_s
    return lines


def csv_summary(run: AttackRun) -> str:
    """One slowhttptest run in a line: its most connected, its last row, how it ended."""
    if not run.rows:
        return f"ran {run.started_s:.0f}-{run.ended_s:.0f}s, no CSV; exit: {run.exit_status}"
    connected = max(row.get("Connected", 0) for row in run.rows)
    last = run.rows[-1]
    unavailable = sum(1 for row in run.rows if row.get("Service Available", 1) == 0)
    return (
        f"ran {run.started_s:.0f}-{run.ended_s:.0f}s: connected up to {connected}; "
        f"at its last second ({last.get('Seconds', '?')}s) connected "
        f"{last.get('Connected', '?')}, closed {last.get('Closed', '?')}, "
        f"pending {last.get('Pending', '?')}; its probe found the service unavailable in "
        f"{unavailable} of {len(run.rows)} seconds; exit: {run.exit_status}"
    )


def cpu_text(row: Measurement) -> str:
    """Server CPU per request and the share of its core others took: what says whether a
    lower rate came from the attack or from the machine."""
    cpu = "-" if row.cpu_us_per_request is None else f"{row.cpu_us_per_request:.0f}"
    other = "-" if row.other_cpu_share is None else f"{100 * row.other_cpu_share:.0f}%"
    return f"{cpu} µs/req, other% {other}"


def show_attack(result: AttackResult, quiet: tuple[Measurement, Measurement]) -> None:
    wrk = result.measurement.result
    before, after = (m.result.rate if m.result else 0.0 for m in quiet)
    low, mean, high = result.held_in_window()
    print(f"\n{result.label}")
    if wrk is not None:
        print(
            f"  list 10: {wrk.rate:,.0f} req/s (quiet {before:,.0f} before, {after:,.0f} "
            f"after), {100 * result.retained:.0f}% retained; p50 {wrk.p50}, p99 {wrk.p99}; "
            f"errors {wrk.errors} non-2xx + {wrk.socket_errors} socket"
        )
        print(
            f"  server CPU: {cpu_text(result.measurement)} under attack; quiet "
            f"{cpu_text(quiet[0])} before, {cpu_text(quiet[1])} after"
        )
        extra = result.cpu_cost()
        if extra is not None:
            print(
                f"  CPU per request under attack {100 * extra:+.0f}% against the quiet runs "
                "(less sensitive than req/s to what else the core runs)"
            )
    held = "never" if result.held_after_s is None else f"after {result.held_after_s:.1f}s"
    released = (
        "not within 15s"
        if result.released_after_s is None
        else f"{result.released_after_s:.1f}s after slowhttptest stopped"
    )
    print(
        f"  slow connections while wrk ran: {low}-{high}, mean {mean:.0f} (first full {held}); "
        f"the server let go of them {released}"
    )
    runs = sorted(result.runs, key=lambda run: run.started_s)
    for number, run in enumerate(runs, 1):
        print(f"  slowhttptest run {number}: {csv_summary(run)}")
    print("    timeline (client-side slow connections, server-side sockets, worker RSS):")
    print("\n".join(timeline(result, 2.0)))


def verdicts(attacks: list[AttackResult], probes: list[Probe]) -> list[report.Verdict]:
    found = []
    for result in attacks:
        found.append(
            report.Verdict(
                f"{result.key}: throughput",
                f">= {100 * RETAINED_TARGET:.0f}% of quiet",
                f"{100 * result.retained:.0f}%",
                result.retained >= RETAINED_TARGET,
            )
        )
        found.append(
            report.Verdict(f"{result.key}: errors", "0", f"{result.errors}", result.errors == 0)
        )
    found += [
        report.Verdict(probe.name, probe.goal, probe.outcome, probe.passed) for probe in probes
    ]
    return found


# --- the run ---------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="5-s wrk runs, fewer seeded rows")
    parser.add_argument("--seconds", type=int, default=None, help="per wrk run (default 10)")
    parser.add_argument("--slow-connections", type=int, default=500)
    parser.add_argument("--connections", type=int, default=32, help="wrk's")
    parser.add_argument("--users", type=int, default=None, help="seeded users (default 100)")
    parser.add_argument("--server-cpus", default="0")
    parser.add_argument("--wrk-cpus", default="1", help="taskset list for wrk")
    parser.add_argument("--attacker-cpus", default="1", help="taskset list for slowhttptest")
    parser.add_argument(
        "--header-timeout",
        type=float,
        default=None,
        help="set PLANTSTORE_HEADER_TIMEOUT and judge (b) by it (default: the server's, 10)",
    )
    parser.add_argument(
        "--body-timeout",
        type=float,
        default=None,
        help="set PLANTSTORE_BODY_TIMEOUT and judge (c) by it (default: the server's, 30)",
    )
    parser.add_argument("--margin", type=float, default=2.0, help="past a deadline (s)")
    parser.add_argument(
        "--observe", type=float, default=None, help="how long (b) and (c) are watched (s)"
    )
    parser.add_argument("--quick-413", type=float, default=2.0, help="(d)/(e) time limit (s)")
    parser.add_argument("--skip-attacks", action="store_true", help="probes only")
    parser.add_argument("--skip-probes", action="store_true", help="slowhttptest only")
    parser.add_argument("--results", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    args.seconds = args.seconds or (5 if args.quick else 10)
    args.users = args.users if args.users is not None else (10 if args.quick else 100)
    return args


def attacks_phase(
    server: Server, options: Options, args: argparse.Namespace
) -> tuple[list[Measurement], list[AttackResult]]:
    """Quiet, attack, quiet, attack, quiet: each attack judged by the quiet runs beside it."""
    quiet = [measure(server, Load(), options, "quiet_1", "list 10, no slow clients")]
    attacks: list[AttackResult] = []
    for number, attack in enumerate(ATTACKS, 2):
        result = run_attack(attack, server, options, args)
        time.sleep(1.0)
        quiet.append(
            measure(server, Load(), options, f"quiet_{number}", "list 10, no slow clients")
        )
        result.quiet = quiet[-2:]
        rates = [m.result.rate for m in result.quiet if m.result is not None]
        result.quiet_rate = sum(rates) / len(rates) if rates else 0.0
        attacks.append(result)
        show_attack(result, (quiet[-2], quiet[-1]))
        print(flush=True)
    return quiet, attacks


def main() -> None:
    args = parse_args()
    stamp, load_before = report.begin_run(
        {"wrk": "wrk", "taskset": "util-linux", "slowhttptest": "slowhttptest"}, args.results
    )
    started = time.monotonic()
    quiet: list[Measurement] = []
    attacks: list[AttackResult] = []
    probes: list[Probe] = []
    with tempfile.TemporaryDirectory(dir=args.results, prefix=".slow-") as directory:
        options = Options(
            seconds=args.seconds,
            connections=args.connections,
            server_cpus=args.server_cpus,
            wrk_cpus=args.wrk_cpus,
            workdir=Path(directory),
        )
        url, token = fresh_sqlite(options, "slow", Layout.for_run(args.users, 100, 0))
        server = serve(options, url, token, args)
        try:
            warm_up(server, options)
            if not args.skip_attacks:
                print(
                    f"list 10 with wrk ({args.connections} connections, {args.seconds}s, "
                    f"CPU {args.wrk_cpus}); server on CPU {args.server_cpus}; slowhttptest on "
                    f"CPU {args.attacker_cpus}",
                    flush=True,
                )
                quiet, attacks = attacks_phase(server, options, args)
            if not args.skip_probes:
                print("probes (raw sockets, one connection each):", flush=True)
                probes = run_probes(server, args)
            serving = still_serving(server)
            server_log = (options.workdir / "slow-clients.log").read_text(errors="replace")
        finally:
            server.stop()
    found = verdicts(attacks, probes)
    print("\ntargets:")
    for verdict in found:
        print(verdict.text(36, 30))
    print(f"afterwards, a list 10 request got: {serving}")
    print(f"load average: {load_before:.2f} before, {report.load_average():.2f} after")
    payload: dict[str, Any] = {
        "started_utc": stamp,
        "duration_s": round(time.monotonic() - started, 1),
        "code": report.code_version(),
        "machine": report.machine(),
        "load_average": {"before": load_before, "after": report.load_average()},
        "settings": {
            **{k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
            "server_env": soak.LIMITS_OFF,
        },
        "quiet": [m.as_json() for m in quiet],
        "attacks": [
            {
                **{k: v for k, v in asdict(a).items() if k not in ("measurement", "quiet")},
                "measurement": a.measurement.as_json(),
                "cpu_cost": a.cpu_cost(),
                "retained": a.retained,
                "errors": a.errors,
                "held_in_window": a.held_in_window(),
            }
            for a in attacks
        ],
        "probes": [asdict(probe) for probe in probes],
        "targets": [asdict(verdict) for verdict in found],
        "passed": all(verdict.passed for verdict in found),
        "after": serving,
        "server_log_tail": server_log.splitlines()[-30:],
    }
    path = args.results / f"slow-clients-{stamp}.json"
    path.write_text(json.dumps(payload, indent=2, default=str) + "\n")
    print(f"\nwritten: {path}")


if __name__ == "__main__":
    main()
