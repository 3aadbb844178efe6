"""One token's traffic: creates, deletes and re-creates in its own id range, each uncertain
attempt repeated until it gets a definite answer, every answer recorded on its key."""

from __future__ import annotations

import enum
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Literal

import httpx

from .config import TortureResult, Value
from .judge import Key
from .victim import Victim

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
