"""Crash safety, Jepsen-style: clients write while the server is SIGKILLed and restarted.

Several users, each with several tokens issued through the real CLI, are driven by client
threads. Each client owns a disjoint range of ids and, for every ``(user, id)`` it touches,
keeps what the plant may be now: absent, or one exact ``(name, tag)``. A 2xx narrows that to
one state; a request cut off by a kill (or answered 503 with ``Retry-After``, the contract's
"the database cannot be reached now") is *uncertain* and widens it to "as before, or as
asked", and the client then repeats exactly that request until it gets a definite answer, so
nothing else is sent for the key while an attempt may still land. A refused connection never
reached a server and changes nothing.

Any other 5xx (a 500, a 502, a 503 without ``Retry-After``) is a *fault*: the server broke
its contract. The key is widened as for an uncertain attempt (the write may have happened
before it broke) and the request repeated, but the answer is recorded and fails the run.

Meanwhile a killer lets traffic run for 50-400 ms, sends SIGKILL to the server's whole
process group, restarts ``plantstore serve`` on the same database and port, and repeats. With
several workers (``TortureConfig.workers``) some kills take one worker alone
(``worker_kill_chance``): granian replaces it while the others serve on, and the killer waits
for the replacement before going on. On SQLite that kills a writer that may hold the file's
write lock mid-transaction while another process's writer waits for it.
Afterwards every user's plants are listed through the API and each key is judged:

- lost: a plant whose create was acknowledged (and not later deleted, or only by a delete
  that may not have happened) is missing or differs in name or tag; or a delete of an
  acknowledged plant answered 404;
- resurrected: a plant whose delete was acknowledged is back (a name and tag that was
  sent for it, but not the state it may be in now); or a delete answered 204 for a plant
  that was surely gone;
- unexpected: a listed plant that no create could have made: a name or tag never sent for
  that key, a key never sent, another user's plant, the same key listed twice.

Answers no valid request should get (401, 409 for an identical repeat, 400, a 200 with the
wrong body, a list out of id order) are counted as odd answers, and fail the run as faults do. On SQLite the file then gets
``PRAGMA integrity_check`` after a clean stop.

``tests/test_torture.py`` runs a bounded version; ``bench/torture.py`` (``make torture``) a
long one. Both call :func:`run_torture`.
"""

from __future__ import annotations

import contextlib
import enum
import math
import os
import random
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal
from urllib.parse import urljoin

import httpx

Value = tuple[str, str | None]  # a plant as listed: name and tag (None: no tag)
State = Value | None  # None: absent

# Words for names and tags: non-ASCII scripts, astral emoji, a combining accent, spaces that
# are not ASCII, quotes and a backslash. No control characters (the contract refuses them).
WORDS = (
    "Monstera",
    "Ficus",
    "Fougère",
    "Ölbaum",
    "Bonsaï",
    "Zürgelbaum",
    "Ñame",
    "Çiçek",
    "多肉植物",
    "サボテン",
    "선인장",
    "Лилия",
    "Αλόη",
    "שושן",
    "صبار",
    "तुलसी",
    "🌵",
    "🌿🪴",
    "e\u0301pine",
    "non\u00a0breaking",
    "line\u2028separator",
    'say "hi"',
    "back\\slash",
    "<b>&amp;</b>",
)
RATE_LIMIT_OFF = "1000000/second"  # the service's per-token limit must never interfere
LIST_LIMIT = 500


class TortureError(RuntimeError):
    """The run could not be carried out (not a finding about the data)."""


@dataclass(frozen=True)
class TortureConfig:
    database_url: str
    workdir: Path  # server logs go here
    kills: int = 100
    clients: int = 12
    users: int = 4
    tokens_per_user: int = 2
    workers: int = 1  # server processes (passed as --workers: the default is one per core)
    # With workers > 1, the chance that a kill takes one worker rather than the whole group.
    worker_kill_chance: float = 0.0
    min_traffic: float = 0.05  # seconds of traffic between a restart and the next kill
    max_traffic: float = 0.4
    startup_kill_chance: float = 0.1  # also kill a restart before it answers, now and then
    seed: int | None = None
    server_env: Mapping[str, str] = field(default_factory=dict)
    progress: Callable[[str], None] | None = None


@dataclass
class TortureResult:
    backend: str
    seed: int
    workers: int = 1
    kills: int = 0  # SIGKILLs under traffic (of the whole group, or of one worker)
    worker_kills: int = 0  # of those, SIGKILLs of one worker, which granian replaced
    startup_kills: int = 0  # extra SIGKILLs of a server still starting
    acknowledged_creates: int = 0
    acknowledged_deletes: int = 0
    uncertain: int = 0  # attempts cut off by a kill, or answered 503 with Retry-After
    unavailable: int = 0  # of those, the 503s with Retry-After
    not_sent: int = 0  # attempts whose connection was refused
    keys: int = 0  # (user, id) pairs a create was attempted for
    listed: int = 0  # plants listed at the end
    lost: list[str] = field(default_factory=list)
    resurrected: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    odd: list[str] = field(default_factory=list)
    faults: list[str] = field(default_factory=list)  # 5xx answers but a 503 with Retry-After
    integrity_check: str = "n/a"
    seconds: float = 0.0
    restart_seconds: float = 0.0  # all restarts after a group kill, from the kill to /healthz
    respawn_seconds: float = 0.0  # all worker kills, from the kill to the replacement serving

    @property
    def mean_restart(self) -> float:
        group_kills = self.kills - self.worker_kills
        return self.restart_seconds / group_kills if group_kills else 0.0

    @property
    def mean_respawn(self) -> float:
        return self.respawn_seconds / self.worker_kills if self.worker_kills else 0.0

    @property
    def passed(self) -> bool:
        return (
            not (self.lost or self.resurrected or self.unexpected or self.odd or self.faults)
            and self.integrity_check in ("ok", "n/a")
            and self.acknowledged_creates > 0
        )

    def findings(self, limit: int = 10) -> str:
        """The first few of each kind of violation, one per line."""
        lines: list[str] = []
        for kind, items in (
            ("lost", self.lost),
            ("resurrected", self.resurrected),
            ("unexpected", self.unexpected),
            ("odd answer", self.odd),
            ("server fault", self.faults),
        ):
            lines += [f"{kind}: {item}" for item in items[:limit]]
            if len(items) > limit:
                lines.append(f"{kind}: ... and {len(items) - limit} more")
        if self.integrity_check not in ("ok", "n/a"):
            lines.append(f"integrity_check: {self.integrity_check}")
        return "\n".join(lines)


# --- the server under test -----------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def child_pids(pid: int) -> set[int]:
    """The processes whose parent is ``pid`` (granian's workers), from /proc."""
    children: set[int] = set()
    with contextlib.suppress(FileNotFoundError):  # the process itself is gone
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(FileNotFoundError):  # a thread that ended meanwhile
                children.update(int(word) for word in (task / "children").read_text().split())
    return children


# granian stops the whole server ("Worker crash loop detected") when a worker it replaced dies
# again within 5.5 s; the killer leaves a replacement alone for longer than that.
REPLACEMENT_SPARED = 6.0


class Victim:
    """``plantstore serve`` in its own process group, killed and restarted on one port."""

    def __init__(self, config: TortureConfig) -> None:
        self._config = config
        self.log_path = config.workdir / "server.log"
        self.port = free_port()
        self._process: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self._replaced_at: dict[int, float] = {}  # replacement worker pid -> when it appeared

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def spawn(self) -> subprocess.Popen[bytes]:
        self.starts += 1
        self._replaced_at.clear()
        args = ["--port", str(self.port), "--workers", str(self._config.workers)]
        env = {
            **os.environ,
            "PLANTSTORE_DATABASE_URL": self._config.database_url,
            "PLANTSTORE_RATE_LIMIT": RATE_LIMIT_OFF,
            # A restart may overlap a killed instance's last moments: no fixed metrics port.
            "PLANTSTORE_METRICS_ADDRESS": "off",
            **self._config.server_env,
        }
        with self.log_path.open("ab") as log:  # the child keeps its own descriptor
            log.write(f"=== start {self.starts} on port {self.port} ===\n".encode())
            log.flush()
            self._process = subprocess.Popen(
                [sys.executable, "-m", "plantstore", "serve", *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,  # its own process group: a kill reaches every worker
            )
        return self._process

    def start(self, timeout: float = 120.0) -> None:
        """Start and wait until /healthz answers; a start that exits is retried, the third
        time on another port (the old one may still be held by a dying worker)."""
        for attempt in range(4):
            if attempt >= 2:
                self.port = free_port()
            process = self.spawn()
            if self._wait_healthy(process, timeout):
                return
            time.sleep(0.2 * (attempt + 1))
        raise TortureError(f"plantstore serve would not start again:\n{self.log_tail()}")

    def _wait_healthy(self, process: subprocess.Popen[bytes], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while process.poll() is None:
            try:
                if httpx.get(f"{self.base_url}/healthz", timeout=2).status_code == 200:
                    return True
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                self.kill()
                raise TortureError(f"plantstore serve did not answer:\n{self.log_tail()}")
            time.sleep(0.02)
        return False

    def workers(self) -> set[int]:
        return set() if self._process is None else child_pids(self._process.pid)

    def killable_worker(self, rng: random.Random) -> int | None:
        """A worker granian will replace if killed now (one not itself just a replacement)."""
        now = time.monotonic()
        candidates = sorted(
            pid
            for pid in self.workers()
            if now - self._replaced_at.get(pid, -math.inf) > REPLACEMENT_SPARED
        )
        return rng.choice(candidates) if candidates else None

    def kill_worker(self, pid: int, timeout: float = 60.0) -> None:
        """SIGKILL one worker, then wait until granian's replacement for it serves; the
        server's main process and other workers serve on meanwhile."""
        assert self._process is not None
        others = self.workers() - {pid}
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + timeout
        while True:
            if self._process.poll() is not None:
                raise TortureError(f"killing worker {pid} ended the server:\n{self.log_tail()}")
            workers = self.workers()
            replacements = workers - others - {pid}
            if pid not in workers and replacements and all(map(self._serving, replacements)):
                break
            if time.monotonic() > deadline:
                raise TortureError(f"worker {pid} was not replaced:\n{self.log_tail()}")
            time.sleep(0.01)
        if not others <= workers:
            raise TortureError(f"killing worker {pid} took others with it: {others - workers}")
        for replacement in replacements:
            self._replaced_at[replacement] = time.monotonic()

    def _serving(self, pid: int) -> bool:
        """Whether granian has logged the worker ``pid`` spawned and then started."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return False
        spawns = list(re.finditer(rf"Spawning worker-(\d+) with PID: {pid}\b", text))
        if not spawns:
            return False
        spawned = spawns[-1]  # the last: a pid of an earlier start may have been reused
        return f"Started worker-{spawned[1]}" in text[spawned.end() :]

    def kill(self) -> None:
        """SIGKILL the whole process group: no shutdown code runs anywhere."""
        if self._process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._process.pid, signal.SIGKILL)
        self._process.wait()
        self._process = None

    def stop(self) -> None:
        """A clean stop: SIGTERM to the group, SIGKILL if it lingers."""
        if self._process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._process.pid, signal.SIGTERM)
        try:
            self._process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.kill()
        self._process = None

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])


def issue_tokens(database_url: str, users: int, per_user: int) -> list[tuple[str, str]]:
    """``(user, token)`` pairs issued by ``plantstore token create`` as a real process.

    The first runs alone (it creates or migrates the schema); the rest two at a time.
    """
    env = {**os.environ, "PLANTSTORE_DATABASE_URL": database_url}

    def create(user: str) -> tuple[str, str]:
        done = subprocess.run(
            [sys.executable, "-m", "plantstore", "token", "create", user],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
            check=False,
        )
        lines = done.stdout.rstrip("\n").splitlines()
        if done.returncode != 0 or not lines or not lines[-1].startswith("pst_"):
            raise TortureError(f"token create {user} failed: {done.stdout}{done.stderr}")
        return user, lines[-1]

    names = [f"torture-{user}" for user in range(users) for _ in range(per_user)]
    first = create(names[0])
    with ThreadPoolExecutor(max_workers=2) as pool:
        return [first, *pool.map(create, names[1:])]


# --- what each key may be ------------------------------------------------------------------


@dataclass
class Key:
    """One ``(user, id)`` and everything known about it."""

    user: str
    plant_id: int
    possible: set[State] = field(default_factory=lambda: {None})
    sent: set[Value] = field(default_factory=set)  # creates that may have reached a server
    version: int = 0

    def describe(self) -> str:
        states = sorted(("absent" if s is None else repr(s)) for s in self.possible)
        return f"user {self.user!r} id {self.plant_id} (may be: {', '.join(states)})"


def judge(key: Key, observed: State) -> list[Literal["lost", "resurrected", "unexpected"]]:
    """What is wrong with seeing ``observed`` for ``key`` (nothing when it may be so)."""
    if observed in key.possible:
        return []
    verdicts: list[Literal["lost", "resurrected", "unexpected"]] = []
    if None not in key.possible:
        verdicts.append("lost")  # an acknowledged plant is missing or not exactly as sent
    if observed is not None:
        verdicts.append("resurrected" if observed in key.sent else "unexpected")
    return verdicts


class Outcome(enum.Enum):
    NOT_SENT = "not sent"  # the connection was refused: no server saw the request
    UNCERTAIN = "uncertain"  # cut off, timed out, or a 503 with Retry-After: it may or may
    # not have happened (a fault is recorded as one and also counted as a fault)
    ANSWERED = "answered"


@dataclass
class Op:
    kind: Literal["create", "delete"]
    key: Key
    value: Value | None = None  # what a create sends
    attempts: int = 0


# --- the clients ---------------------------------------------------------------------------


@dataclass
class Signals:
    """What the killer tells the clients."""

    up: threading.Event = field(default_factory=threading.Event)  # the server answers
    stop: threading.Event = field(default_factory=threading.Event)  # settle up and return
    abort: threading.Event = field(default_factory=threading.Event)  # return now


class Client(threading.Thread):
    """One token's traffic: create, delete and re-create plants in its own id range."""

    def __init__(
        self,
        index: int,
        user: str,
        token: str,
        victim: Victim,
        signals: Signals,
        rng: random.Random,
    ) -> None:
        super().__init__(name=f"torture-client-{index}", daemon=True)
        self.user = user
        self._victim = victim
        self._signals = signals
        self._rng = rng
        # Disjoint ranges that reach both ends of the signed 64-bit range.
        half = index // 2
        self._base = 2**63 - 2**32 * (half + 1) if index % 2 == 0 else -(2**63) + 2**32 * half
        self._next = 0
        self._headers = {"Authorization": f"Bearer {token}"}
        self.keys: list[Key] = []
        self._present: list[Key] = []  # acknowledged, not since deleted
        self._absent: list[Key] = []  # acknowledged deleted (or 404)
        self.result = TortureResult(backend="", seed=0)  # this client's counts and findings
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with httpx.Client(timeout=httpx.Timeout(30.0, connect=5.0)) as http:
                self._loop(http)
        except BaseException as exc:  # handed to the main thread, which re-raises it
            self.error = exc

    def _loop(self, http: httpx.Client) -> None:
        pending: Op | None = None
        finish_by: float | None = None
        signals = self._signals
        while not signals.abort.is_set():
            if signals.stop.is_set():
                if pending is None:
                    return
                finish_by = finish_by or time.monotonic() + 60
                if time.monotonic() > finish_by:
                    return  # it stays uncertain; the final judgement allows both outcomes
            op = pending or self._choose()
            op.attempts += 1
            outcome, response = self._send(http, op)
            pending = self._record(op, outcome, response)
            if pending is None or outcome is Outcome.ANSWERED:
                continue
            # The server is down: wait for the restart, probing now and then. After a 503
            # (or a fault) from a live server, pause a little before repeating the request.
            if signals.up.wait(0.25) and response is not None:
                time.sleep(0.05)

    def _choose(self) -> Op:
        roll = self._rng.random()
        if roll < 0.25 and self._present:
            return Op("delete", self._take(self._present))
        if roll < 0.35 and self._absent:
            key = self._take(self._absent)
            return Op("create", key, self._new_value(key))
        key = Key(self.user, self._base + self._next)
        self._next += 1
        self.keys.append(key)
        return Op("create", key, self._new_value(key))

    def _take(self, keys: list[Key]) -> Key:
        index = self._rng.randrange(len(keys))
        keys[index], keys[-1] = keys[-1], keys[index]
        return keys.pop()

    def _new_value(self, key: Key) -> Value:
        """A fresh name (the id and a version first, so a listed plant names its key) and a
        tag, or none."""
        key.version += 1
        words = self._rng.choices(WORDS, k=self._rng.randint(1, 4))
        name = f"{key.plant_id}~{key.version} {' '.join(words)}"
        if self._rng.random() < 0.3:
            return name, None
        tag = " ".join(self._rng.choices(WORDS, k=self._rng.randint(1, 3)))[:64]
        return name, tag.strip() or "x"

    def _send(self, http: httpx.Client, op: Op) -> tuple[Outcome, httpx.Response | None]:
        base = self._victim.base_url  # read each time: a restart may move the port
        try:
            if op.kind == "create":
                assert op.value is not None
                name, tag = op.value
                body: dict[str, object] = {"id": op.key.plant_id, "name": name}
                if tag is not None:
                    body["tag"] = tag
                response = http.post(f"{base}/plants", json=body, headers=self._headers)
            else:
                response = http.delete(f"{base}/plants/{op.key.plant_id}", headers=self._headers)
        except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout):
            return Outcome.NOT_SENT, None
        except httpx.TransportError:
            return Outcome.UNCERTAIN, None
        status = response.status_code
        if status == 503 and response.headers.get("retry-after"):
            self.result.unavailable += 1  # "try again": the contract's answer to an outage
            return Outcome.UNCERTAIN, response
        if status >= 500:  # a fault; the write may still have happened, so: uncertain too
            self.result.faults.append(
                f"{op.kind} (attempt {op.attempts}) answered {status} "
                f"(Retry-After: {response.headers.get('retry-after')}) {response.text[:200]} "
                f"for {op.key.describe()}"
            )
            return Outcome.UNCERTAIN, response
        return Outcome.ANSWERED, response

    def _record(self, op: Op, outcome: Outcome, response: httpx.Response | None) -> Op | None:
        """Update the key from one attempt; return the op again when it must be repeated."""
        key = op.key
        counts = self.result
        if outcome is Outcome.NOT_SENT:
            counts.not_sent += 1
            return op
        if outcome is Outcome.UNCERTAIN:
            counts.uncertain += 1
            if op.kind == "create":
                assert op.value is not None
                key.sent.add(op.value)
                key.possible.add(op.value)
            else:
                key.possible.add(None)
            return op
        assert response is not None
        status = response.status_code
        if status == 429:  # refused before it ran (should not happen: limits are off)
            counts.odd.append(f"429 for a {op.kind} of {key.describe()}")
            return op
        if op.kind == "create":
            assert op.value is not None
            key.sent.add(op.value)
            if status == 200:
                self._check_create_body(op, response)
                if not key.possible & {None, op.value}:  # another plant should be there
                    counts.odd.append(f"create {op.value!r} answered 200 for {key.describe()}")
                counts.acknowledged_creates += 1
                key.possible = {op.value}
                self._present.append(key)
                return None
            counts.odd.append(
                f"create {op.value!r} (attempt {op.attempts}) answered {status} "
                f"{response.text[:200]} for {key.describe()}"
            )
            return None  # the key's state is unknown now: leave it alone
        if status == 204:
            if key.possible == {None}:
                self._finding("resurrected", f"delete answered 204 for {key.describe()}")
            counts.acknowledged_deletes += 1
            key.possible = {None}
            self._absent.append(key)
            return None
        if status == 404:
            if None not in key.possible:
                self._finding("lost", f"delete answered 404 for {key.describe()}")
            key.possible = {None}
            self._absent.append(key)
            return None
        counts.odd.append(
            f"delete (attempt {op.attempts}) answered {status} {response.text[:200]} "
            f"for {key.describe()}"
        )
        return None

    def _check_create_body(self, op: Op, response: httpx.Response) -> None:
        assert op.value is not None
        name, tag = op.value
        expected: dict[str, object] = {"name": name} if tag is None else {"name": name, "tag": tag}
        try:
            body = response.json()
        except ValueError:
            body = response.text
        if body != expected:
            self.result.odd.append(f"create answered 200 with {body!r}, sent {op.value!r}")

    def _finding(self, verdict: str, text: str) -> None:
        getattr(self.result, verdict).append(text)


# --- the final look ------------------------------------------------------------------------


def list_plants(http: httpx.Client, base_url: str, token: str) -> tuple[list[Value], list[str]]:
    """Every plant of the token's user, page by page; and any odd answers on the way."""
    plants: list[Value] = []
    odd: list[str] = []
    url: str | None = f"{base_url}/plants?limit={LIST_LIMIT}"
    headers = {"Authorization": f"Bearer {token}"}
    while url is not None:
        response = http.get(url, headers=headers)
        if response.status_code != 200:
            raise TortureError(f"listing answered {response.status_code}: {response.text}")
        for plant in response.json():
            extra = set(plant) - {"name", "tag"}
            if extra or "name" not in plant or plant.get("tag", "") is None:
                odd.append(f"listed plant has a bad shape: {plant!r}")
            plants.append((plant["name"], plant.get("tag")))
        link = response.headers.get("link")
        url = urljoin(url, link[link.index("<") + 1 : link.index(">")]) if link else None
    return plants, odd


def plant_id_of(name: str) -> int | None:
    head = name.split(" ", 1)[0]
    try:
        return int(head.partition("~")[0])
    except ValueError:
        return None


def judge_listing(
    result: TortureResult, keys: dict[tuple[str, int], Key], listings: dict[str, list[Value]]
) -> None:
    """Compare each user's listed plants with what each key may be."""
    observed: dict[tuple[str, int], State] = {}
    for user, plants in listings.items():
        last_id: int | None = None
        for value in plants:
            plant_id = plant_id_of(value[0])
            where = f"user {user!r} lists {value!r}"
            if plant_id is None:
                result.unexpected.append(f"{where}: no plant of ours is named so")
                continue
            if last_id is not None and plant_id <= last_id:
                result.odd.append(f"{where} after id {last_id}: not in ascending id order")
            last_id = plant_id
            key_id = (user, plant_id)
            if key_id not in keys:
                result.unexpected.append(f"{where}: id {plant_id} was never sent by this user")
            elif key_id in observed:
                result.unexpected.append(f"{where}: id {plant_id} listed twice")
            else:
                observed[key_id] = value
    result.listed = sum(len(plants) for plants in listings.values())
    for key_id, key in keys.items():
        seen = observed.get(key_id)
        for verdict in judge(key, seen):
            shown = "absent" if seen is None else repr(seen)
            getattr(result, verdict).append(f"{key.describe()} is listed as {shown}")


def sqlite_integrity(database_url: str) -> str:
    path = database_url.removeprefix("sqlite:///")
    with contextlib.closing(sqlite3.connect(path, timeout=30)) as conn:
        rows = conn.execute("PRAGMA integrity_check").fetchall()
    return "; ".join(str(row[0]) for row in rows)


# --- the run -------------------------------------------------------------------------------


def run_torture(config: TortureConfig) -> TortureResult:
    """Drive the clients, kill and restart the server ``config.kills`` times, then judge."""
    started = time.monotonic()
    seed = config.seed if config.seed is not None else random.randrange(2**32)
    rng = random.Random(seed)
    backend = "sqlite" if config.database_url.startswith("sqlite") else "postgres"
    result = TortureResult(backend=backend, seed=seed, workers=config.workers)
    config.workdir.mkdir(parents=True, exist_ok=True)

    tokens = issue_tokens(config.database_url, config.users, config.tokens_per_user)
    if config.progress:
        config.progress(f"{backend}: {len(tokens)} tokens for {config.users} users; seed {seed}")
    victim = Victim(config)
    signals = Signals()
    clients = []
    for index in range(config.clients):
        user, token = tokens[index % len(tokens)]
        client_rng = random.Random(rng.randrange(2**32))
        clients.append(Client(index, user, token, victim, signals, client_rng))
    try:
        victim.start()
        signals.up.set()
        for client in clients:
            client.start()
        kill_and_restart(config, result, victim, signals, clients, rng, started)
        signals.stop.set()  # the clients settle what is still uncertain, then return
        for client in clients:
            client.join(timeout=120)
            if client.error is not None:
                raise TortureError(f"{client.name} failed") from client.error
            if client.is_alive():
                raise TortureError(f"{client.name} did not finish")
        final_look(result, clients, tokens, victim.base_url)
    except BaseException:
        signals.abort.set()
        signals.up.set()
        victim.kill()
        for client in clients:
            if client.is_alive():
                client.join(timeout=60)
        raise
    victim.stop()
    if backend == "sqlite":
        result.integrity_check = sqlite_integrity(config.database_url)
    result.seconds = time.monotonic() - started
    return result


def kill_and_restart(
    config: TortureConfig,
    result: TortureResult,
    victim: Victim,
    signals: Signals,
    clients: list[Client],
    rng: random.Random,
    started: float,
) -> None:
    """Let traffic run 50-400 ms, SIGKILL, restart, wait for /healthz; ``config.kills`` times.

    With several workers, a kill now and then takes one worker instead (see ``Victim``)."""
    for kill in range(1, config.kills + 1):
        time.sleep(rng.uniform(config.min_traffic, config.max_traffic))
        for client in clients:
            if client.error is not None:
                raise TortureError(f"{client.name} failed") from client.error
        worker = None
        if config.workers > 1 and rng.random() < config.worker_kill_chance:
            worker = victim.killable_worker(rng)
        if worker is not None:
            killed = time.monotonic()
            victim.kill_worker(worker)  # the server stays up: the clients go on
            result.kills += 1
            result.worker_kills += 1
            result.respawn_seconds += time.monotonic() - killed
            report_progress(config, result, kill, started)
            continue
        signals.up.clear()
        killed = time.monotonic()
        victim.kill()
        result.kills += 1
        if rng.random() < config.startup_kill_chance:
            victim.spawn()
            time.sleep(rng.uniform(0.0, 1.5))
            victim.kill()
            result.startup_kills += 1
        victim.start()
        signals.up.set()
        result.restart_seconds += time.monotonic() - killed
        report_progress(config, result, kill, started)


def report_progress(
    config: TortureConfig, result: TortureResult, kill: int, started: float
) -> None:
    if config.progress and (kill % 10 == 0 or kill == config.kills):
        one = f" ({result.worker_kills} of one worker)" if result.worker_kills else ""
        config.progress(
            f"{result.backend}: {kill}/{config.kills} kills{one}, {time.monotonic() - started:.0f}s"
        )


def final_look(
    result: TortureResult, clients: list[Client], tokens: list[tuple[str, str]], base_url: str
) -> None:
    """Add up the clients, check every token still works, list every user and judge."""
    keys: dict[tuple[str, int], Key] = {}
    for client in clients:
        counts = client.result
        for name in (
            "acknowledged_creates",
            "acknowledged_deletes",
            "uncertain",
            "unavailable",
            "not_sent",
        ):
            setattr(result, name, getattr(result, name) + getattr(counts, name))
        for name in ("lost", "resurrected", "unexpected", "odd", "faults"):
            getattr(result, name).extend(getattr(counts, name))
        keys.update(((key.user, key.plant_id), key) for key in client.keys)
    result.keys = len(keys)
    listings: dict[str, list[Value]] = {}
    with httpx.Client(timeout=60) as http:
        for user, token in tokens:
            response = http.get(
                f"{base_url}/plants?limit=0", headers={"Authorization": f"Bearer {token}"}
            )
            if response.status_code != 200:
                result.odd.append(f"a token of {user!r} answered {response.status_code} at the end")
            elif user not in listings:
                listings[user], odd = list_plants(http, base_url, token)
                result.odd.extend(odd)
    judge_listing(result, keys, listings)
