"""The bounded create load (N clients, one request at a time each, every id unique and
increasing for the whole run), the /readyz and /healthz probes, and the final listing."""

from __future__ import annotations

import itertools
import threading
import time
from dataclasses import dataclass

import httpx

from .config import CLIENT_TIMEOUT

PAUSE_AFTER_REFUSAL = 0.02  # a refused create is not repeated at once: the load stays bounded
PROBE_EVERY = 0.1
NAME_PREFIX = "fault plant #"  # a listed plant carries no id: its name says it


@dataclass(frozen=True)
class Answer:
    """One request and what came of it: ``status`` None when no answer came (``error`` says
    why: ``timeout`` or ``connection``)."""

    plant_id: int
    sent: float
    answered: float
    status: int | None
    error: str | None = None
    retry_after: str | None = None
    body: str | None = None  # kept for 5xx answers

    @property
    def seconds(self) -> float:
        return self.answered - self.sent

    @property
    def proper_503(self) -> bool:
        """The contract's outage answer: 503, Retry-After, the Error body."""
        return self.status == 503 and bool(self.retry_after) and error_body(self.body, 503)

    @property
    def label(self) -> str:
        if self.status is None:
            return self.error or "no answer"
        if self.status == 503 and not self.proper_503:
            return "503!"  # without Retry-After or the Error body: a fault
        return str(self.status)


def error_body(body: str | None, status: int) -> bool:
    """Whether ``body`` is exactly {"error": status, "message": "<something>"}."""
    if not body:
        return False
    try:
        parsed = httpx.Response(200, content=body.encode()).json()
    except ValueError:
        return False
    return (
        isinstance(parsed, dict)
        and set(parsed) == {"error", "message"}
        and parsed["error"] == status
        and isinstance(parsed["message"], str)
        and bool(parsed["message"].strip())
    )


class Load:
    """Clients creating plants until stopped; ``paused`` holds them between requests (while
    the operator restarts the service), ``token`` may change (a fresh database's token)."""

    def __init__(self, base_url: str, token: str, clients: int) -> None:
        self.base_url = base_url
        self.token = token
        self.answers: list[Answer] = []
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._running = threading.Event()
        self._stopping = threading.Event()
        self._threads = [
            threading.Thread(target=self._client, name=f"faults-client-{n}", daemon=True)
            for n in range(clients)
        ]

    def start(self) -> None:
        self._running.set()
        for thread in self._threads:
            thread.start()

    def pause(self) -> None:
        self._running.clear()

    def resume(self) -> None:
        self._running.set()

    def stop(self) -> None:
        self._stopping.set()
        self._running.set()
        for thread in self._threads:
            thread.join(timeout=CLIENT_TIMEOUT + 5)

    def _next_id(self) -> int:
        with self._lock:
            return next(self._ids)

    def _client(self) -> None:
        with httpx.Client(base_url=self.base_url, timeout=CLIENT_TIMEOUT) as http:
            while not self._stopping.is_set():
                if not self._running.wait(timeout=0.1):
                    continue
                if self._stopping.is_set():
                    break
                answer = self._create(http, self._next_id())
                self.answers.append(answer)
                if answer.status != 200:
                    time.sleep(PAUSE_AFTER_REFUSAL)

    def _create(self, http: httpx.Client, plant_id: int) -> Answer:
        headers = {"Authorization": f"Bearer {self.token}"}
        body = {"id": plant_id, "name": f"{NAME_PREFIX}{plant_id}"}
        sent = time.monotonic()
        try:
            response = http.post("/plants", json=body, headers=headers)
        except httpx.TimeoutException:
            return Answer(plant_id, sent, time.monotonic(), None, "timeout")
        except httpx.TransportError:
            return Answer(plant_id, sent, time.monotonic(), None, "connection")
        return Answer(
            plant_id,
            sent,
            time.monotonic(),
            response.status_code,
            retry_after=response.headers.get("retry-after"),
            body=response.text[:500] if response.status_code >= 500 else None,
        )


@dataclass(frozen=True)
class Probe:
    sent: float
    answered: float
    status: int | None  # None: no answer (refused, cut off, timed out)


class Prober:
    """GET ``path`` every 0.1 s, each on a new connection (so every worker is asked)."""

    def __init__(self, base_url: str, path: str, timeout: float) -> None:
        self.path = path
        self.probes: list[Probe] = []
        self._http = httpx.Client(
            base_url=base_url, timeout=timeout, limits=httpx.Limits(max_keepalive_connections=0)
        )
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"faults-{path}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(timeout=30)
        self._http.close()

    def _run(self) -> None:
        while not self._stopping.is_set():
            sent = time.monotonic()
            try:
                status: int | None = self._http.get(self.path).status_code
            except httpx.HTTPError:
                status = None
            self.probes.append(Probe(sent, time.monotonic(), status))
            self._stopping.wait(max(0.0, PROBE_EVERY - (time.monotonic() - sent)))


def listed_ids(base_url: str, token: str, patience: float = 15.0) -> set[int]:
    """Every plant id of the token's user, page by page along ``Link``; a page refused (the
    service still recovering) is asked again until ``patience`` runs out."""
    ids: set[int] = set()
    url: str | None = "/plants?limit=1000"
    deadline = time.monotonic() + patience
    with httpx.Client(base_url=base_url, timeout=CLIENT_TIMEOUT) as http:
        while url is not None:
            try:
                response = http.get(url, headers={"Authorization": f"Bearer {token}"})
            except httpx.HTTPError as exc:
                response = None
                problem = f"{type(exc).__name__}: {exc}"
            if response is not None and response.status_code == 200:
                ids.update(id_of(plant["name"]) for plant in response.json())
                link = response.headers.get("link")
                url = link[1 : link.index(">")] if link else None
                continue
            if response is not None:
                problem = f"{response.status_code} {response.text[:200]}"
            if time.monotonic() > deadline:
                raise RuntimeError(f"could not list the plants: {problem}")
            time.sleep(0.2)
    return ids


def id_of(name: str) -> int:
    return int(name.removeprefix(NAME_PREFIX)) if name.startswith(NAME_PREFIX) else -1
